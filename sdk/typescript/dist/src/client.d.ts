/**
 * The HTTP side: one cluster's routes on any of the oracle's replicas, with a cluster key.
 *
 * The oracle's replicas are interchangeable (state lives in Postgres), so a replica that does not
 * answer, or answers 503 (load shed, or its store unreachable) or 502 or 504 (a proxy in front of
 * it could not reach it), is left for the next one at once;
 * what the last one said is what the caller gets. The replica that answered is asked first next
 * time, so a healthy cluster talks to one replica and a failed one costs one attempt per call.
 */
import { type Logger } from "./logger.js";
/** The part of `fetch` the client uses; inject one to test without a network. */
export type Fetch = (url: string, init: RequestInit) => Promise<Response>;
export interface OracleClientOptions {
    /** A cluster key (or the admin token), sent as `Authorization: Bearer …`. */
    key?: string;
    /** Per attempt, ms (2000 by default): a replica slower than this counts as unreachable. */
    timeoutMs?: number;
    fetch?: Fetch;
    logger?: Logger;
}
/** A successful answer: the status and the parsed JSON body (null when there is none). */
export interface Answer<T> {
    status: number;
    body: T;
}
export type Params = Record<string, string | number | boolean>;
export interface CallOptions {
    /** Sent as JSON; absent means no body. */
    body?: unknown;
    params?: Params;
    /** Sent with this request only (e.g. `if-match` on `PUT …/policy`). */
    headers?: Record<string, string>;
    /**
     * The longest one replica is waited for, when shorter than the client's `timeoutMs`: for calls
     * that may safely reach two replicas (heartbeats).
     */
    attemptTimeoutMs?: number | undefined;
}
export declare class OracleClient {
    readonly urls: readonly string[];
    readonly cluster: string;
    readonly timeoutMs: number;
    readonly logger: Logger;
    private readonly headers;
    private readonly fetch;
    private preferred;
    constructor(urls: string | readonly string[], cluster: string, options?: OracleClientOptions);
    /** The cluster's path for `rest` (which starts with `/` and is already percent-encoded). */
    path(rest: string): string;
    /**
     * Sends to the preferred replica, then to each other one while they fail; throws `OracleError`
     * for a problem, or (status 0) when none answers. Any route of the cluster can be reached this
     * way, with the same failover and problems.
     */
    call<T = unknown>(method: string, rest: string, options?: CallOptions): Promise<Answer<T>>;
}
