/**
 * What the oracle refused, as one error type a runtime can branch on.
 *
 * The oracle answers every error as an RFC 9457 problem whose `type` is a stable URN
 * (`urn:placement-oracle:problem:silo-declared-dead`); its last segment is what the SDK and its
 * users compare, never the human-readable `title` or `detail`.
 */
export declare class OracleError extends Error {
    /** The HTTP status; 0 when no replica could be reached. */
    readonly status: number;
    /** The problem type's last segment (`rate-limited`, `silo-declared-dead`, …). */
    readonly problem: string;
    readonly detail: string;
    /** Seconds the oracle asked to wait (`Retry-After`), null when it did not say. */
    readonly retryAfter: number | null;
    readonly name = "OracleError";
    constructor(
    /** The HTTP status; 0 when no replica could be reached. */
    status: number, 
    /** The problem type's last segment (`rate-limited`, `silo-declared-dead`, …). */
    problem: string, detail: string, 
    /** Seconds the oracle asked to wait (`Retry-After`), null when it did not say. */
    retryAfter?: number | null);
    /**
     * Whether the same request may succeed later: nothing answered (or not as the oracle answers), a
     * rate limit, or the replica (or a proxy in front of it) unable to serve now.
     */
    get retryable(): boolean;
}
/**
 * Statuses that say this replica cannot serve now, not that the request is wrong: 503 is the
 * oracle's own (load shed, store unreachable); 502 and 504 are a proxy's in front of a replica that
 * is down or slow. The client sends the request to the next replica at once on each.
 */
export declare const UNAVAILABLE: ReadonlySet<number>;
/** Turns an error answer into an `OracleError`, whatever its body (a proxy may answer HTML). */
export declare function problemOf(response: Response): Promise<OracleError>;
