import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { OracleClient, OracleError, silentLogger } from "../../src/index.js";
import { fakeFetch, json, problem } from "./fake.js";

describe("OracleClient", () => {
  test("a replica that fails is left for the next at once, and the one that answered is asked first", async () => {
    const fetch = fakeFetch(({ url }) => {
      if (url.hostname === "a") throw new TypeError("fetch failed: connection refused");
      if (url.hostname === "b") return problem(503, "store-unavailable", "1");
      return json({ ok: true });
    });
    const client = new OracleClient(["http://a", "http://b", "http://c"], "demo", { fetch, logger: silentLogger });
    assert.deepEqual((await client.call("GET", "/silos")).body, { ok: true });
    assert.deepEqual(fetch.sent.map(({ url }) => url.hostname), ["a", "b", "c"]);
    await client.call("GET", "/silos");
    assert.equal(fetch.sent.at(-1)?.url.hostname, "c");
    assert.equal(fetch.sent.length, 4);
  });

  test("a proxy's 502 or 504 is left for the next replica at once, as a 503 is; all three are retryable", async () => {
    const fetch = fakeFetch(({ url }) => {
      if (url.hostname === "a") return new Response("<html>bad gateway</html>", { status: 502 });
      if (url.hostname === "b") return new Response("<html>gateway timeout</html>", { status: 504 });
      return json({ ok: true });
    });
    const client = new OracleClient(["http://a", "http://b", "http://c"], "demo", { fetch, logger: silentLogger });
    assert.deepEqual((await client.call("GET", "/silos")).body, { ok: true });
    assert.deepEqual(fetch.sent.map(({ url }) => url.hostname), ["a", "b", "c"]);
    for (const status of [502, 503, 504]) {
      const alone = new OracleClient("http://a", "demo", {
        fetch: fakeFetch(() => new Response(null, { status })),
        logger: silentLogger,
      });
      await assert.rejects(alone.call("GET", "/silos"), { status, retryable: true });
    }
    assert.equal(new OracleError(500, "internal", "").retryable, false);
  });

  test("a replica slower than the timeout counts as unreachable", async () => {
    // A replica that never answers, until the client's signal gives up on it (a real socket would
    // keep the process alive meanwhile; AbortSignal.timeout's own timer does not, so this does).
    const never = (signal: AbortSignal | null | undefined): Promise<Response> =>
      new Promise((_, reject) => {
        const alive = setTimeout(() => {}, 5_000);
        signal?.addEventListener("abort", () => {
          clearTimeout(alive);
          reject(signal.reason);
        });
      });
    const seen: string[] = [];
    const client = new OracleClient(["http://slow", "http://fast"], "demo", {
      fetch: async (url, init) => {
        seen.push(new URL(url).hostname);
        return url.startsWith("http://slow") ? never(init.signal) : json({ ok: true });
      },
      timeoutMs: 20,
      logger: silentLogger,
    });
    const started = performance.now();
    assert.deepEqual((await client.call("GET", "/silos")).body, { ok: true });
    assert.deepEqual(seen, ["slow", "fast"]);
    assert.ok(performance.now() - started < 1_000, "given up on after its timeout");
  });

  test("when every replica fails, the last failure is what the caller gets", async () => {
    const down = new OracleClient(["http://a", "http://b"], "demo", {
      fetch: fakeFetch(() => {
        throw new TypeError("fetch failed");
      }),
      logger: silentLogger,
    });
    await assert.rejects(down.call("GET", "/silos"), (error: unknown) => {
      assert.ok(error instanceof OracleError);
      assert.equal(error.status, 0);
      assert.equal(error.problem, "unreachable");
      assert.equal(error.retryable, true);
      return true;
    });

    const shedding = new OracleClient(["http://a", "http://b"], "demo", {
      fetch: fakeFetch(({ url }) => problem(503, url.hostname === "a" ? "overloaded" : "store-unavailable", "2")),
      logger: silentLogger,
    });
    await assert.rejects(shedding.call("GET", "/silos"), { status: 503, problem: "store-unavailable", retryAfter: 2 });
  });

  test("problems carry their type's last segment, detail and Retry-After", async () => {
    const client = new OracleClient("http://a", "demo", {
      fetch: fakeFetch(() => problem(429, "rate-limited", "2")),
      logger: silentLogger,
    });
    const error = await client.call("POST", "/heartbeats", { body: {} }).catch((e: unknown) => e);
    assert.ok(error instanceof OracleError);
    assert.equal(error.status, 429);
    assert.equal(error.problem, "rate-limited");
    assert.equal(error.detail, "rate-limited");
    assert.equal(error.retryAfter, 2);
    assert.equal(error.retryable, true);
    assert.match(error.message, /^429 rate-limited/);
  });

  test("a refusal is not retryable, and a body that is not a problem still gives an error", async () => {
    const refused = new OracleClient(["http://a", "http://b"], "demo", {
      fetch: fakeFetch(() => problem(409, "silo-declared-dead")),
      logger: silentLogger,
    });
    await assert.rejects(refused.call("POST", "/heartbeats", { body: {} }), (error: unknown) => {
      assert.ok(error instanceof OracleError);
      assert.equal(error.problem, "silo-declared-dead");
      assert.equal(error.retryAfter, null);
      assert.equal(error.retryable, false);
      return true;
    });

    const proxy = new OracleClient("http://a", "demo", {
      fetch: fakeFetch(() => new Response("<html>bad gateway</html>", { status: 502 })),
      logger: silentLogger,
    });
    await assert.rejects(proxy.call("GET", "/silos"), {
      status: 502,
      problem: "unknown",
      detail: "<html>bad gateway</html>",
    });
  });

  test("paths, query, credential and body are sent as the oracle expects", async () => {
    const fetch = fakeFetch(() => new Response(null, { status: 204 }));
    const client = new OracleClient("http://a:8080/", "demo", { fetch, key: "k-123", logger: silentLogger });
    const answer = await client.call("DELETE", "/activations/user%2Falice", { params: { silo: "10.0.0.1:1@1", epoch: 3 } });
    assert.deepEqual(answer, { status: 204, body: null });
    await client.call("POST", "/placements", { body: { grain: "user/alice" } });
    await client.call("PUT", "/policy", { body: {}, headers: { "if-match": "*" } });
    const [deletion, placement, policy] = fetch.sent;
    assert.equal(deletion?.url.pathname, "/v1/clusters/demo/activations/user%2Falice");
    assert.equal(deletion?.url.searchParams.get("silo"), "10.0.0.1:1@1");
    assert.equal(deletion?.url.searchParams.get("epoch"), "3");
    assert.equal(deletion?.headers["authorization"], "Bearer k-123");
    assert.equal(deletion?.headers["content-type"], undefined, "no body, no content type");
    assert.deepEqual(placement?.body, { grain: "user/alice" });
    assert.equal(placement?.headers["content-type"], "application/json");
    assert.equal(placement?.headers["if-match"], undefined, "a request's own headers are its alone");
    assert.equal(policy?.headers["if-match"], "*");
    assert.equal(policy?.headers["authorization"], "Bearer k-123");
  });

  test("at least one URL", () => {
    assert.throws(() => new OracleClient([], "demo"), RangeError);
  });
});
