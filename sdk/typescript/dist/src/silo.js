/**
 * A silo's membership: it joins (`joining`, then `active`), heartbeats on a timer with the load
 * its host reports, and tracks its lease, so that the runtime knows whether it may run grains now.
 *
 * The rules it keeps (README, "What a runtime does with an answer"): the lease counts from when a
 * heartbeat was *sent*; heartbeats go out on their own timer, each apart, so a slow answer does
 * not hold back the next; after a 429 or 503 the next waits as `Retry-After` says; when the lease
 * runs out (the oracle unreachable) the grains pause, and when a heartbeat is acknowledged again
 * they resume under the same registrations; only when told `silo-declared-dead` are they dropped,
 * and the silo rejoins as the next generation. `stop()` drains first: the oracle issues migrations
 * for the silo's grains (a `MigrationWorker` carries them out), and the silo leaves once none
 * remains or at a deadline, after `onLeave` has stopped the grains still running (`leave()` does
 * the last two at once).
 *
 * Hooks, and what calls them: `onPause` comes from the silo's timer (the moment the lease runs
 * out) or from the heartbeat that finds it ran out; `onResume` from the heartbeat acknowledged
 * again; `onDead` from the heartbeat told the silo is dead, awaited before the next generation
 * heartbeats; `onLeave` from `stop()`/`leave()`, awaited before the `DELETE`; `load` from each
 * heartbeat. What a hook throws (or rejects with) is logged as a warning and goes no further: a
 * hook that broke the silo's timers would cost it its lease.
 */
import { Backoff } from "./backoff.js";
import { monotonic } from "./clock.js";
import { OracleError } from "./errors.js";
import { Lease } from "./lease.js";
import { sleep } from "./sleep.js";
const nothing = () => { };
export class Silo {
    client;
    address;
    generation;
    /** What the next heartbeat reports. */
    status = "joining";
    lease = new Lease();
    /**
     * The lease the last acknowledgement granted (ms): a heartbeat waits at most a third of it for
     * one replica before it tries the next (see `heartbeat`).
     */
    grantedMs;
    /** How many times the oracle declared this silo dead. */
    deaths = 0;
    intervalMs;
    logger;
    load;
    fixed;
    hooks;
    clock;
    backoff;
    maxInFlight;
    inFlight = new Set();
    quietUntil = 0;
    /** Granted a lease since it (re)joined: only then do pause and resume mean anything. */
    running = false;
    paused = false;
    /** `onDead` is under way: the next incarnation's heartbeats wait until its grains are dropped. */
    mourning = false;
    /** Set for good by `stop()`/`leave()`: a death from then on ends the silo, it does not rejoin. */
    stopping = false;
    /** Set for good just before the leave (or by a death while stopping): no grain runs again. */
    left = false;
    timer;
    expiry;
    constructor(client, address, options = {}) {
        this.client = client;
        this.address = address;
        this.generation = options.generation ?? Date.now();
        this.load = options.load ?? (() => ({}));
        this.fixed = { address };
        if (options.grainTypes !== undefined)
            this.fixed["grain_types"] = [...options.grainTypes];
        if (options.role !== undefined)
            this.fixed["role"] = options.role;
        if (options.metadata !== undefined)
            this.fixed["metadata"] = { ...options.metadata };
        this.intervalMs = options.intervalMs ?? 1_000;
        this.hooks = {
            onPause: options.onPause ?? nothing,
            onResume: options.onResume ?? nothing,
            onDead: options.onDead ?? nothing,
            onLeave: options.onLeave ?? nothing,
        };
        this.clock = options.clock ?? monotonic;
        this.backoff = options.backoff ?? new Backoff();
        this.logger = options.logger ?? client.logger;
        this.maxInFlight = options.maxHeartbeatsInFlight ?? 4;
    }
    /** `address@generation`: the incarnation the oracle knows. */
    get siloId() {
        return `${this.address}@${this.generation}`;
    }
    /** Monotonic ms before which the timer sends no heartbeat (what `Retry-After` asked). */
    get nextHeartbeatAt() {
        return this.quietUntil;
    }
    /** Whether the silo holds its lease now: run grains only while this is true (never once it leaves). */
    mayRunGrains() {
        return !this.left && this.lease.holds(this.clock());
    }
    /**
     * As `mayRunGrains`, and the silo is still incarnation `silo`: a claim made before the silo was
     * declared dead and rejoined is not the new incarnation's to run.
     */
    mayRunGrainsAs(silo) {
        return this.siloId === silo && this.mayRunGrains();
    }
    /**
     * Joins (one `joining` heartbeat, then `active`) and starts the timer. A silo told it is dead on
     * the way rejoins as the next generation; a 429 or 503 is waited out until `timeoutMs`.
     */
    async join(options = {}) {
        const deadline = this.clock() + (options.timeoutMs ?? 10_000);
        for (;;) {
            try {
                await this.beat();
                if (this.status === "joining") {
                    this.status = "active";
                    await this.beat();
                }
                break;
            }
            catch (error) {
                if (!(error instanceof OracleError) || this.clock() >= deadline)
                    throw error;
                if (error.problem === "silo-declared-dead")
                    continue;
                if (!error.retryable)
                    throw error;
                // Not past the deadline: a long Retry-After is answered by throwing, not by waiting.
                await sleep(Math.min(this.backoff.nextDelay(error.retryAfter), Math.max(0, deadline - this.clock())));
            }
        }
        this.startTimer();
    }
    /**
     * One heartbeat, now. Resolves whether it was acknowledged for the incarnation that sent it and
     * is still current (false: that one was declared dead, or left, meanwhile, and the answer grants
     * nothing). Throws what the oracle refused (a death is handled first), and an `OracleError`
     * `unexpected-answer` (status 0) for a 200 without a numeric `lease_ms`.
     */
    async beat() {
        return this.heartbeat();
    }
    async heartbeat() {
        // Taken before anything else: the lease may only be shorter than the oracle's, never longer.
        const sentAt = this.clock();
        const generation = this.generation;
        const silo = this.siloId;
        const status = this.status;
        const body = { ...this.fixed, ...(await this.readLoad()), silo, status };
        // A replica that takes the connection but does not answer (frozen, its VM paused) must not
        // hold the heartbeat until the silo's silence reaches the TTL, where the replicas that run
        // would find it dead: a third of the lease each, so two are tried within it.
        const attemptTimeoutMs = this.grantedMs === undefined ? undefined : Math.ceil(this.grantedMs / 3);
        let answer;
        try {
            answer = await this.client.call("POST", "/heartbeats", { body, attemptTimeoutMs });
        }
        catch (error) {
            if (error instanceof OracleError) {
                if (error.problem === "silo-declared-dead") {
                    // A heartbeat of an incarnation already given up on says nothing about the new one.
                    if (generation === this.generation)
                        await this.declaredDead();
                }
                else if (error.retryable) {
                    this.quietAfter(error.retryAfter);
                }
            }
            throw error;
        }
        const leaseMs = leaseOf(answer.body);
        if (generation !== this.generation || this.left)
            return false;
        this.grantedMs = leaseMs;
        this.backoff.reset();
        const now = this.clock();
        const lapsed = !this.lease.holds(now);
        if (!this.lease.grant(sentAt, leaseMs, now))
            return true;
        if (this.running && lapsed) {
            if (!this.paused) {
                // It ran out between two looks: say so, so that the hooks always come in pairs.
                await this.pause();
            }
            this.paused = false;
            this.logger.info(`silo ${this.siloId} holds its lease again: grains resume`);
            await this.hook("onResume");
            // The hooks took time: a death or a leave meanwhile is not to be undone here.
            if (generation !== this.generation || this.left)
                return false;
        }
        this.running = true;
        this.armExpiry();
        return true;
    }
    /** Waits after a 429 or 503 as the oracle asked, but never past half the lease still held. */
    quietAfter(retryAfter) {
        const delay = this.backoff.nextDelay(retryAfter);
        const now = this.clock();
        // A rate limit or a shed load must not keep a silo silent until its lease runs out and its
        // grains pause: it tries again by half the lease it holds (or one interval, if longer).
        this.quietUntil = now + Math.min(delay, Math.max(this.intervalMs, this.lease.remaining(now) / 2));
    }
    /**
     * The host's load. If `load` throws, the heartbeat goes without it (the oracle needs only the
     * id): a heartbeat not sent could cost the lease, and with it every grain.
     */
    async readLoad() {
        try {
            return await this.load();
        }
        catch (error) {
            this.logger.warn(`load of silo ${this.siloId} threw: this heartbeat reports none`, error);
            return {};
        }
    }
    async declaredDead() {
        if (this.left)
            return; // leaving already: `onLeave` stops the grains
        const old = this.siloId;
        this.lease = new Lease();
        this.grantedMs = undefined;
        this.deaths += 1;
        this.running = false;
        this.paused = false;
        clearTimeout(this.expiry);
        if (this.stopping) {
            // The death ends a stopping silo: no next generation, which nothing would drain or leave.
            this.left = true;
            this.logger.warn(`silo ${old} was declared dead while stopping: its grains are dropped`);
            await this.hook("onDead");
            return;
        }
        this.status = "joining";
        this.generation += 1;
        this.logger.warn(`silo ${old} was declared dead: its grains are dropped; rejoining as ${this.siloId}`);
        this.mourning = true;
        try {
            await this.hook("onDead");
        }
        finally {
            this.mourning = false;
        }
    }
    startTimer() {
        if (this.timer !== undefined)
            return;
        this.timer = setInterval(() => this.tick(), this.intervalMs);
        this.armExpiry();
    }
    tick() {
        if (!this.mourning && !this.left && this.clock() >= this.quietUntil && this.inFlight.size < this.maxInFlight) {
            // Each heartbeat on its own: a slow one does not hold back the next.
            const beat = this.beatQuietly().finally(() => this.inFlight.delete(beat));
            this.inFlight.add(beat);
        }
        this.checkLease();
    }
    async beatQuietly() {
        const generation = this.generation;
        try {
            // Active only on its own acknowledgement: an answer for the incarnation before a death must
            // not make the next one active before its first (`joining`) heartbeat.
            if ((await this.heartbeat()) && this.generation === generation && this.status === "joining") {
                this.status = "active";
            }
        }
        catch (error) {
            if (error instanceof OracleError) {
                this.logger.debug(`heartbeat of ${this.siloId}: ${error.message}`);
            }
            else {
                this.logger.warn(`heartbeat of ${this.siloId} failed: ${String(error)}`);
            }
        }
    }
    /** Wakes when the lease would run out, so that grains pause then rather than a round later. */
    armExpiry() {
        clearTimeout(this.expiry);
        if (this.timer === undefined)
            return;
        const wait = Math.ceil(this.lease.remaining(this.clock())) + 1;
        this.expiry = setTimeout(() => this.checkLease(), wait);
    }
    checkLease() {
        if (this.running && !this.paused && !this.mayRunGrains()) {
            void this.pause();
        }
    }
    async pause() {
        this.paused = true;
        this.logger.warn(`silo ${this.siloId} lost its lease: grains pause`);
        await this.hook("onPause");
    }
    /** Calls one of the runtime's hooks; what it throws is logged, never passed on. */
    async hook(name) {
        try {
            await this.hooks[name]();
        }
        catch (error) {
            this.logger.warn(`${name} of silo ${this.siloId} threw: ${String(error)}`, error);
        }
    }
    /**
     * Drains and leaves: asks the oracle to move every grain away (carried out by the silo's
     * `MigrationWorker`, which must keep running), heartbeating as `shutting_down` meanwhile, waits
     * until none remains or the deadline, then leaves as `leave()` does (`onLeave` stops the grains
     * still running first). The drain and the leave both need a key with the `operator` scope. It
     * leaves even when the drain could not be asked for (and then throws what the oracle said); a
     * death meanwhile ends it (`onDead`, no rejoin). Resolves how many activations remained when it
     * left.
     */
    async stop(options = {}) {
        const silo = this.beginStopping();
        const path = `/silos/${encodeURIComponent(silo)}`;
        const pollMs = options.pollMs ?? 200;
        let remaining = -1;
        try {
            await this.client.call("POST", `${path}/drain`);
            const deadline = this.clock() + (options.drainDeadlineMs ?? 30_000);
            while (this.clock() < deadline && !this.left) {
                const view = await this.client.call("GET", path);
                remaining = view.body.drain?.remaining_activations ?? 0;
                if (remaining === 0)
                    break;
                await sleep(pollMs);
            }
        }
        finally {
            await this.leaveAs(silo);
        }
        return Math.max(remaining, 0);
    }
    /**
     * Leaves at once, without draining: stops heartbeating, stops the grains still running
     * (`onLeave`), then `DELETE …/silos/{silo}` (a key with the `operator` scope) releases their
     * registrations, so that they are placed anew on their next call.
     */
    async leave() {
        await this.leaveAs(this.beginStopping());
    }
    /**
     * From now on a death ends the silo instead of rejoining it. Returns the incarnation that is
     * stopping: the one the leave is for, whatever happens meanwhile.
     */
    beginStopping() {
        this.stopping = true;
        this.status = "shutting_down";
        return this.siloId;
    }
    /**
     * Stops heartbeating and makes sure no grain runs before the `DELETE`: the oracle places the
     * silo's grains anew the moment it answers, so one still running here would run twice.
     */
    async leaveAs(silo) {
        await this.close();
        const died = this.left; // declared dead while stopping: `onDead` has dropped the grains
        this.left = true;
        if (!died) {
            this.logger.info(`silo ${silo} leaves: the grains still running stop`);
            await this.hook("onLeave");
        }
        await this.client.call("DELETE", `/silos/${encodeURIComponent(silo)}`);
    }
    /** Stops heartbeating without leaving (the oracle will judge the silence). */
    async close() {
        clearInterval(this.timer);
        clearTimeout(this.expiry);
        this.timer = undefined;
        this.expiry = undefined;
        await Promise.allSettled([...this.inFlight]);
    }
}
/**
 * The lease an acknowledgement grants, ms. A 200 without a finite number there is no answer the
 * oracle gives (a proxy's page, another service on the port): it grants nothing, and says so.
 */
function leaseOf(body) {
    const lease = body !== null && typeof body === "object" ? body["lease_ms"] : undefined;
    if (typeof lease !== "number" || !Number.isFinite(lease)) {
        const text = JSON.stringify(body) ?? String(body);
        throw new OracleError(0, "unexpected-answer", `a heartbeat answered without lease_ms: ${text.slice(0, 200)}`);
    }
    return lease;
}
//# sourceMappingURL=silo.js.map