/**
 * The silo lease, as pure arithmetic on one monotonic clock (ms).
 *
 * Every acknowledged heartbeat grants `lease_ms`, counted from when the silo *sent* it: the oracle
 * promises not to declare the silo dead before then, and it cannot know how long the answer took
 * to come back. A later acknowledgement never shortens a lease already held (heartbeats may be
 * answered out of order), and one that arrives after its own lease ran out grants nothing (the
 * oracle may have judged the silo in between, and another silo may be running its grains).
 */
export declare class Lease {
    /** Until when (monotonic ms) the silo may run its grains; 0 means never granted. */
    until: number;
    /**
     * Records the acknowledgement of a heartbeat sent at `sentAt`; says whether it extended the
     * lease.
     */
    grant(sentAt: number, leaseMs: number, now: number): boolean;
    holds(now: number): boolean;
    /** How long it still holds, ms (0 once it ran out). */
    remaining(now: number): number;
}
