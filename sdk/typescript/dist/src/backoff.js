/**
 * How long to wait before trying again: what `Retry-After` says, else exponential with jitter.
 *
 * The oracle sends `Retry-After` with 429 (a rate limit: it knows when the next token comes) and
 * 503 (load shed, or the store unreachable); it knows better than a client's guess, so it wins.
 * Otherwise delays double from `baseMs` up to `capMs`, each drawn at random between half the
 * ceiling and the ceiling, so that silos that failed together do not retry together.
 */
/**
 * A small seeded generator (mulberry32), so that tests get one sequence per seed. Not for
 * anything secret.
 */
export function seededRandom(seed) {
    let state = seed >>> 0;
    return () => {
        state = (state + 0x6d2b79f5) >>> 0;
        let t = state;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}
export class Backoff {
    baseMs;
    capMs;
    rng;
    /** Attempts since the last `reset()`. */
    attempt = 0;
    constructor(options = {}) {
        this.baseMs = options.baseMs ?? 50;
        this.capMs = options.capMs ?? 2_000;
        this.rng = options.rng ?? Math.random;
    }
    /** The wait before the next attempt, ms; `retryAfter` is the oracle's, in seconds. */
    nextDelay(retryAfter) {
        this.attempt += 1;
        // NaN would compare false with every time and so put off the next attempt forever.
        if (retryAfter !== undefined && retryAfter !== null && !Number.isNaN(retryAfter)) {
            return Math.min(Math.max(retryAfter * 1000, 0), this.capMs * 30);
        }
        const ceiling = Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.attempt - 1, 30));
        return ceiling / 2 + this.rng() * (ceiling / 2);
    }
    /** After a success: the next failure starts from `baseMs` again. */
    reset() {
        this.attempt = 0;
    }
}
/**
 * The longest `Retry-After` taken as given, seconds. The oracle sends a few seconds at most; a
 * larger value (a proxy's, or garbage) is held to this, so that no header silences a client for good.
 */
export const MAX_RETRY_AFTER_S = 3_600;
/**
 * Seconds from a `Retry-After` header (the oracle sends whole seconds), at most
 * `MAX_RETRY_AFTER_S`; null when absent, not a number, negative or not finite (an HTTP date is not
 * something the oracle sends).
 */
export function parseRetryAfter(value) {
    if (value === null || value === undefined || value.trim() === "") {
        return null;
    }
    const seconds = Number(value);
    return Number.isFinite(seconds) && seconds >= 0 ? Math.min(seconds, MAX_RETRY_AFTER_S) : null;
}
//# sourceMappingURL=backoff.js.map