/**
 * Time as the SDK reads it: one monotonic clock in milliseconds. Leases are measured on it, so it
 * must not jump when the wall clock is set (`Date.now()` would); tests inject their own.
 */
export type Clock = () => number;
export declare const monotonic: Clock;
