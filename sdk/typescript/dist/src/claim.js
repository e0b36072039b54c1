/**
 * The registration rule: a silo runs a grain only under a registration it holds.
 *
 * A call arrives at a silo that does not run the grain. It does not activate on the caller's word
 * (the caller may have read a cached answer that another replica has since ended or moved): it asks
 * the oracle as the requesting silo, and an answer naming the asker is never served from a cache,
 * so it is the store's. Its own id means it holds the registration: run here under that epoch.
 * Another silo means forward the call there. A stateless worker may run anywhere.
 */
/** What the silo `ownSilo` does with the oracle's answer to its own placement request. */
export function decide(ownSilo, placement) {
    const { grain } = placement;
    if (placement.outcome === "stateless") {
        return { kind: "run-here", grain, epoch: null, silo: ownSilo };
    }
    if (placement.epoch === null) {
        throw new TypeError(`placement of ${grain} (${placement.outcome}) names no epoch`);
    }
    if (placement.silo === ownSilo) {
        return { kind: "run-here", grain, epoch: placement.epoch, silo: ownSilo };
    }
    return {
        kind: "forward-to",
        grain,
        silo: placement.silo,
        address: placement.address,
        epoch: placement.epoch,
    };
}
//# sourceMappingURL=claim.js.map