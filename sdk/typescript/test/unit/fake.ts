/** A fake oracle for unit tests: a `fetch` that hands each request to a function, no network. */

import type { Fetch } from "../../src/index.js";

export interface Sent {
  method: string;
  url: URL;
  headers: Record<string, string>;
  body: unknown;
  /** The request's abort signal (its timeout). */
  signal?: AbortSignal | undefined;
  /** When it was sent (`performance.now()`). */
  at: number;
}

export type Handler = (request: Sent) => Response | Promise<Response>;

/** A `fetch` that records what was sent in `sent` and answers with `handler`. */
export function fakeFetch(handler: Handler): Fetch & { sent: Sent[] } {
  const sent: Sent[] = [];
  const fetch = async (url: string, init: RequestInit): Promise<Response> => {
    const request: Sent = {
      method: init.method ?? "GET",
      url: new URL(url),
      headers: { ...(init.headers as Record<string, string>) },
      body: typeof init.body === "string" ? JSON.parse(init.body) : undefined,
      signal: init.signal ?? undefined,
      at: performance.now(),
    };
    sent.push(request);
    return handler(request);
  };
  return Object.assign(fetch, { sent });
}

export function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json" },
  });
}

export function problem(status: number, kind: string, retryAfter?: string): Response {
  const headers: Record<string, string> = { "content-type": "application/problem+json" };
  if (retryAfter !== undefined) headers["retry-after"] = retryAfter;
  const body = { type: `urn:placement-oracle:problem:${kind}`, title: kind, detail: kind, status, errors: [] };
  return new Response(JSON.stringify(body), { status, headers });
}

/** A clock the test moves by hand. */
export function manualClock(start = 0): { now: number; clock: () => number } {
  const state = {
    now: start,
    clock: () => state.now,
  };
  return state;
}

/** Resolves once `check` holds, polling every few ms; fails after `withinMs`. */
export async function until(what: string, check: () => boolean, withinMs = 2_000): Promise<void> {
  const started = performance.now();
  while (!check()) {
    if (performance.now() - started > withinMs) throw new Error(`${what}: not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}
