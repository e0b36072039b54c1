/**
 * How long to wait before trying again: what `Retry-After` says, else exponential with jitter.
 *
 * The oracle sends `Retry-After` with 429 (a rate limit: it knows when the next token comes) and
 * 503 (load shed, or the store unreachable); it knows better than a client's guess, so it wins.
 * Otherwise delays double from `baseMs` up to `capMs`, each drawn at random between half the
 * ceiling and the ceiling, so that silos that failed together do not retry together.
 */
/** A source of numbers in [0, 1), like `Math.random`. */
export type Random = () => number;
/**
 * A small seeded generator (mulberry32), so that tests get one sequence per seed. Not for
 * anything secret.
 */
export declare function seededRandom(seed: number): Random;
export interface BackoffOptions {
    /** The first ceiling, ms (50 by default). */
    baseMs?: number;
    /** The largest ceiling, ms (2000 by default); a `Retry-After` is held to 30 times it. */
    capMs?: number;
    rng?: Random;
}
export declare class Backoff {
    readonly baseMs: number;
    readonly capMs: number;
    private readonly rng;
    /** Attempts since the last `reset()`. */
    attempt: number;
    constructor(options?: BackoffOptions);
    /** The wait before the next attempt, ms; `retryAfter` is the oracle's, in seconds. */
    nextDelay(retryAfter?: number | null): number;
    /** After a success: the next failure starts from `baseMs` again. */
    reset(): void;
}
/**
 * The longest `Retry-After` taken as given, seconds. The oracle sends a few seconds at most; a
 * larger value (a proxy's, or garbage) is held to this, so that no header silences a client for good.
 */
export declare const MAX_RETRY_AFTER_S = 3600;
/**
 * Seconds from a `Retry-After` header (the oracle sends whole seconds), at most
 * `MAX_RETRY_AFTER_S`; null when absent, not a number, negative or not finite (an HTTP date is not
 * something the oracle sends).
 */
export declare function parseRetryAfter(value: string | null | undefined): number | null;
