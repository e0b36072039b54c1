/**
 * Placement for callers (`locate`) and for the silo a call arrived at (`claim`), and `release`.
 *
 * `locate` may answer from a short cache: an answer names an activation (silo and epoch), and a
 * caller whose call the silo refuses because it no longer runs that activation `forget`s that
 * epoch and asks again. Being wrong costs a forwarded call, never a second activation, because the
 * silo that receives the call does not trust it: it `claim`s the grain, asking the oracle as the
 * requesting silo, which always gets the store's answer, and applies the registration rule.
 */
import { decide } from "./claim.js";
import { monotonic } from "./clock.js";
import { OracleError } from "./errors.js";
export class Placement {
    client;
    /** The silo calls arrive at; needed by `claim` and `release`, not by `locate`. */
    silo;
    cacheTtlMs;
    cacheEntries;
    clock;
    /** In insertion order, so the first entry is the oldest. */
    cache = new Map();
    constructor(client, silo, options = {}) {
        this.client = client;
        this.silo = silo;
        this.cacheTtlMs = options.cacheTtlMs ?? 1_000;
        this.cacheEntries = Math.max(1, options.cacheEntries ?? 10_000);
        this.clock = options.clock ?? monotonic;
    }
    /** Where `grain` runs (placing it if it runs nowhere): the oracle's answer, perhaps kept. */
    async locate(grain) {
        const now = this.clock();
        const kept = this.cache.get(grain);
        if (kept !== undefined) {
            if (now - kept.at < this.cacheTtlMs)
                return kept.answer;
            this.cache.delete(grain);
        }
        const { body } = await this.client.call("POST", "/placements", {
            body: { grain },
        });
        // A stateless worker has no activation to remember: any silo may run the next call.
        if (body.outcome !== "stateless" && this.cacheTtlMs > 0) {
            this.cache.delete(grain);
            this.cache.set(grain, { at: now, answer: body });
            while (this.cache.size > this.cacheEntries) {
                const oldest = this.cache.keys().next();
                if (oldest.done)
                    break;
                this.cache.delete(oldest.value);
            }
        }
        return body;
    }
    /** Drops the kept answer if it names activation `epoch` (its silo said it does not run it). */
    forget(grain, epoch) {
        if (this.cache.get(grain)?.answer.epoch === epoch) {
            this.cache.delete(grain);
        }
    }
    /** For the silo a call arrived at: run it here under an epoch, or forward it. */
    async claim(grain) {
        const silo = this.own("claim");
        const { body } = await this.client.call("POST", "/placements", {
            body: { grain, requesting_silo: silo.siloId },
        });
        return decide(silo.siloId, body);
    }
    /**
     * Deactivates activation `epoch` of `grain` on this silo; false when the registration was no
     * longer that one (moved, or ended already), so a late retry never ends a newer activation.
     */
    async release(grain, epoch) {
        const silo = this.own("release");
        try {
            await this.client.call("DELETE", `/activations/${encodeURIComponent(grain)}`, {
                params: { silo: silo.siloId, epoch },
            });
        }
        catch (error) {
            if (error instanceof OracleError && (error.status === 404 || error.status === 409)) {
                return false;
            }
            throw error;
        }
        this.forget(grain, epoch);
        return true;
    }
    own(what) {
        if (this.silo === undefined) {
            throw new TypeError(`${what} needs the silo the call arrived at`);
        }
        return this.silo;
    }
}
//# sourceMappingURL=placement.js.map