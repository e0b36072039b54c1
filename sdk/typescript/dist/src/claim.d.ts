/**
 * The registration rule: a silo runs a grain only under a registration it holds.
 *
 * A call arrives at a silo that does not run the grain. It does not activate on the caller's word
 * (the caller may have read a cached answer that another replica has since ended or moved): it asks
 * the oracle as the requesting silo, and an answer naming the asker is never served from a cache,
 * so it is the store's. Its own id means it holds the registration: run here under that epoch.
 * Another silo means forward the call there. A stateless worker may run anywhere.
 */
import type { PlacementAnswer } from "./wire.js";
export interface RunHere {
    kind: "run-here";
    grain: string;
    /** The activation to run; null for a stateless worker (never registered). */
    epoch: number | null;
    /**
     * The incarnation that asked: run it only while `silo.mayRunGrainsAs(claim.silo)` (a claim made
     * before the silo was declared dead and rejoined is not the new incarnation's).
     */
    silo: string;
}
export interface ForwardTo {
    kind: "forward-to";
    grain: string;
    silo: string;
    address: string;
    epoch: number;
}
export type Claim = RunHere | ForwardTo;
/** What the silo `ownSilo` does with the oracle's answer to its own placement request. */
export declare function decide(ownSilo: string, placement: PlacementAnswer): Claim;
