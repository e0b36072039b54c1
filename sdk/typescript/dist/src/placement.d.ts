/**
 * Placement for callers (`locate`) and for the silo a call arrived at (`claim`), and `release`.
 *
 * `locate` may answer from a short cache: an answer names an activation (silo and epoch), and a
 * caller whose call the silo refuses because it no longer runs that activation `forget`s that
 * epoch and asks again. Being wrong costs a forwarded call, never a second activation, because the
 * silo that receives the call does not trust it: it `claim`s the grain, asking the oracle as the
 * requesting silo, which always gets the store's answer, and applies the registration rule.
 */
import { type Claim } from "./claim.js";
import { type Clock } from "./clock.js";
import type { OracleClient } from "./client.js";
import type { Silo } from "./silo.js";
import type { PlacementAnswer } from "./wire.js";
export interface PlacementOptions {
    /** How long a `locate` answer is reused, ms (1000 by default; 0 turns the cache off). */
    cacheTtlMs?: number;
    /** Answers kept at most (10,000 by default); the oldest go first. */
    cacheEntries?: number;
    clock?: Clock;
}
export declare class Placement {
    readonly client: OracleClient;
    /** The silo calls arrive at; needed by `claim` and `release`, not by `locate`. */
    readonly silo: Silo | undefined;
    private readonly cacheTtlMs;
    private readonly cacheEntries;
    private readonly clock;
    /** In insertion order, so the first entry is the oldest. */
    private readonly cache;
    constructor(client: OracleClient, silo?: Silo, options?: PlacementOptions);
    /** Where `grain` runs (placing it if it runs nowhere): the oracle's answer, perhaps kept. */
    locate(grain: string): Promise<PlacementAnswer>;
    /** Drops the kept answer if it names activation `epoch` (its silo said it does not run it). */
    forget(grain: string, epoch: number): void;
    /** For the silo a call arrived at: run it here under an epoch, or forward it. */
    claim(grain: string): Promise<Claim>;
    /**
     * Deactivates activation `epoch` of `grain` on this silo; false when the registration was no
     * longer that one (moved, or ended already), so a late retry never ends a newer activation.
     */
    release(grain: string, epoch: number): Promise<boolean>;
    private own;
}
