/**
 * What the oracle refused, as one error type a runtime can branch on.
 *
 * The oracle answers every error as an RFC 9457 problem whose `type` is a stable URN
 * (`urn:placement-oracle:problem:silo-declared-dead`); its last segment is what the SDK and its
 * users compare, never the human-readable `title` or `detail`.
 */
import { parseRetryAfter } from "./backoff.js";
export class OracleError extends Error {
    status;
    problem;
    detail;
    retryAfter;
    name = "OracleError";
    constructor(
    /** The HTTP status; 0 when no replica could be reached. */
    status, 
    /** The problem type's last segment (`rate-limited`, `silo-declared-dead`, …). */
    problem, detail, 
    /** Seconds the oracle asked to wait (`Retry-After`), null when it did not say. */
    retryAfter = null) {
        super(`${status} ${problem}: ${detail}`);
        this.status = status;
        this.problem = problem;
        this.detail = detail;
        this.retryAfter = retryAfter;
    }
    /**
     * Whether the same request may succeed later: nothing answered (or not as the oracle answers), a
     * rate limit, or the replica (or a proxy in front of it) unable to serve now.
     */
    get retryable() {
        return this.status === 0 || this.status === 429 || UNAVAILABLE.has(this.status);
    }
}
/**
 * Statuses that say this replica cannot serve now, not that the request is wrong: 503 is the
 * oracle's own (load shed, store unreachable); 502 and 504 are a proxy's in front of a replica that
 * is down or slow. The client sends the request to the next replica at once on each.
 */
export const UNAVAILABLE = new Set([502, 503, 504]);
/** Turns an error answer into an `OracleError`, whatever its body (a proxy may answer HTML). */
export async function problemOf(response) {
    let text = "";
    try {
        text = await response.text();
    }
    catch {
        // the body was cut off: the status alone still says what happened
    }
    let problem = {};
    try {
        const parsed = JSON.parse(text);
        if (parsed !== null && typeof parsed === "object") {
            problem = parsed;
        }
    }
    catch {
        // not JSON: keep the start of the text as the detail
    }
    const type = typeof problem["type"] === "string" ? problem["type"] : "";
    const kind = type.split(":").pop() || "unknown";
    const detail = typeof problem["detail"] === "string" ? problem["detail"] : text.slice(0, 200);
    return new OracleError(response.status, kind, detail, parseRetryAfter(response.headers.get("retry-after")));
}
//# sourceMappingURL=errors.js.map