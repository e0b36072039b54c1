/**
 * What the oracle refused, as one error type a runtime can branch on.
 *
 * The oracle answers every error as an RFC 9457 problem whose `type` is a stable URN
 * (`urn:placement-oracle:problem:silo-declared-dead`); its last segment is what the SDK and its
 * users compare, never the human-readable `title` or `detail`.
 */

import { parseRetryAfter } from "./backoff.js";

export class OracleError extends Error {
  override readonly name = "OracleError";

  constructor(
    /** The HTTP status; 0 when no replica could be reached. */
    readonly status: number,
    /** The problem type's last segment (`rate-limited`, `silo-declared-dead`, …). */
    readonly problem: string,
    readonly detail: string,
    /** Seconds the oracle asked to wait (`Retry-After`), null when it did not say. */
    readonly retryAfter: number | null = null,
  ) {
    super(`${status} ${problem}: ${detail}`);
  }

  /** Whether the same request may succeed later: nothing answered, a rate limit, or a 503. */
  get retryable(): boolean {
    return this.status === 0 || this.status === 429 || this.status === 503;
  }
}

/** Turns an error answer into an `OracleError`, whatever its body (a proxy may answer HTML). */
export async function problemOf(response: Response): Promise<OracleError> {
  let text = "";
  try {
    text = await response.text();
  } catch {
    // the body was cut off: the status alone still says what happened
  }
  let problem: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed !== null && typeof parsed === "object") {
      problem = parsed as Record<string, unknown>;
    }
  } catch {
    // not JSON: keep the start of the text as the detail
  }
  const type = typeof problem["type"] === "string" ? problem["type"] : "";
  const kind = type.split(":").pop() || "unknown";
  const detail = typeof problem["detail"] === "string" ? problem["detail"] : text.slice(0, 200);
  return new OracleError(
    response.status,
    kind,
    detail,
    parseRetryAfter(response.headers.get("retry-after")),
  );
}
