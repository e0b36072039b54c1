/**
 * The silo lease, as pure arithmetic on one monotonic clock (ms).
 *
 * Every acknowledged heartbeat grants `lease_ms`, counted from when the silo *sent* it: the oracle
 * promises not to declare the silo dead before then, and it cannot know how long the answer took
 * to come back. A later acknowledgement never shortens a lease already held (heartbeats may be
 * answered out of order), and one that arrives after its own lease ran out grants nothing (the
 * oracle may have judged the silo in between, and another silo may be running its grains).
 */
export class Lease {
    /** Until when (monotonic ms) the silo may run its grains; 0 means never granted. */
    until = 0;
    /**
     * Records the acknowledgement of a heartbeat sent at `sentAt`; says whether it extended the
     * lease.
     */
    grant(sentAt, leaseMs, now) {
        const granted = sentAt + leaseMs;
        if (granted <= now || granted <= this.until) {
            return false;
        }
        this.until = granted;
        return true;
    }
    holds(now) {
        return now < this.until;
    }
    /** How long it still holds, ms (0 once it ran out). */
    remaining(now) {
        return Math.max(0, this.until - now);
    }
}
//# sourceMappingURL=lease.js.map