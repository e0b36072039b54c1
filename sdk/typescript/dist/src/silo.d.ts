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
import { type Clock } from "./clock.js";
import type { OracleClient } from "./client.js";
import { Lease } from "./lease.js";
import type { Logger } from "./logger.js";
import type { Load } from "./wire.js";
/** What the runtime does when the silo's state changes; awaited, and what it throws is logged. */
export type Hook = () => void | Promise<void>;
/** The statuses a silo reports (`dead` is the oracle's verdict, never reported). */
export type ReportedStatus = "joining" | "active" | "shutting_down";
export interface SiloOptions {
    /** The incarnation; by default the time now in ms, so a restarted process is a new one. */
    generation?: number;
    /** The host's load, read for every heartbeat. */
    load?: () => Load | Promise<Load>;
    /** Grain types this silo can host; absent means every type. */
    grainTypes?: readonly string[];
    role?: string;
    metadata?: Readonly<Record<string, string>>;
    /** Between heartbeats, ms (1000 by default: several per lease at the default TTL). */
    intervalMs?: number;
    /** The lease ran out: stop running grains, keep their registrations. */
    onPause?: Hook;
    /** A heartbeat was acknowledged again: run them again, under the same epochs. */
    onResume?: Hook;
    /**
     * Declared dead: drop every grain for good (the silo rejoins as the next generation, unless it
     * was stopping: then the death ends it).
     */
    onDead?: Hook;
    /**
     * The silo is about to leave: stop every grain still running — their registrations are released
     * by the leave.
     */
    onLeave?: Hook;
    clock?: Clock;
    backoff?: Backoff;
    logger?: Logger;
    /** Heartbeats in flight at once, at most (4 by default); a round beyond it is skipped. */
    maxHeartbeatsInFlight?: number;
}
export interface StopOptions {
    /**
     * How long to wait for the drain, ms (30 s by default); the silo leaves then regardless, after
     * `onLeave` has stopped the grains still running.
     */
    drainDeadlineMs?: number;
    /** Between reads of the drain's progress, ms. */
    pollMs?: number;
}
export declare class Silo {
    readonly client: OracleClient;
    readonly address: string;
    generation: number;
    /** What the next heartbeat reports. */
    status: ReportedStatus;
    lease: Lease;
    /**
     * The lease the last acknowledgement granted (ms): a heartbeat waits at most a third of it for
     * one replica before it tries the next (see `heartbeat`).
     */
    private grantedMs;
    /** How many times the oracle declared this silo dead. */
    deaths: number;
    readonly intervalMs: number;
    readonly logger: Logger;
    private readonly load;
    private readonly fixed;
    private readonly hooks;
    private readonly clock;
    private readonly backoff;
    private readonly maxInFlight;
    private readonly inFlight;
    private quietUntil;
    /** Granted a lease since it (re)joined: only then do pause and resume mean anything. */
    private running;
    private paused;
    /** `onDead` is under way: the next incarnation's heartbeats wait until its grains are dropped. */
    private mourning;
    /** Set for good by `stop()`/`leave()`: a death from then on ends the silo, it does not rejoin. */
    private stopping;
    /** Set for good just before the leave (or by a death while stopping): no grain runs again. */
    private left;
    private timer;
    private expiry;
    constructor(client: OracleClient, address: string, options?: SiloOptions);
    /** `address@generation`: the incarnation the oracle knows. */
    get siloId(): string;
    /** Monotonic ms before which the timer sends no heartbeat (what `Retry-After` asked). */
    get nextHeartbeatAt(): number;
    /** Whether the silo holds its lease now: run grains only while this is true (never once it leaves). */
    mayRunGrains(): boolean;
    /**
     * As `mayRunGrains`, and the silo is still incarnation `silo`: a claim made before the silo was
     * declared dead and rejoined is not the new incarnation's to run.
     */
    mayRunGrainsAs(silo: string): boolean;
    /**
     * Joins (one `joining` heartbeat, then `active`) and starts the timer. A silo told it is dead on
     * the way rejoins as the next generation; a 429 or 503 is waited out until `timeoutMs`.
     */
    join(options?: {
        timeoutMs?: number;
    }): Promise<void>;
    /**
     * One heartbeat, now. Resolves whether it was acknowledged for the incarnation that sent it and
     * is still current (false: that one was declared dead, or left, meanwhile, and the answer grants
     * nothing). Throws what the oracle refused (a death is handled first), and an `OracleError`
     * `unexpected-answer` (status 0) for a 200 without a numeric `lease_ms`.
     */
    beat(): Promise<boolean>;
    private heartbeat;
    /** Waits after a 429 or 503 as the oracle asked, but never past half the lease still held. */
    private quietAfter;
    /**
     * The host's load. If `load` throws, the heartbeat goes without it (the oracle needs only the
     * id): a heartbeat not sent could cost the lease, and with it every grain.
     */
    private readLoad;
    private declaredDead;
    private startTimer;
    private tick;
    private beatQuietly;
    /** Wakes when the lease would run out, so that grains pause then rather than a round later. */
    private armExpiry;
    private checkLease;
    private pause;
    /** Calls one of the runtime's hooks; what it throws is logged, never passed on. */
    private hook;
    /**
     * Drains and leaves: asks the oracle to move every grain away (carried out by the silo's
     * `MigrationWorker`, which must keep running), heartbeating as `shutting_down` meanwhile, waits
     * until none remains or the deadline, then leaves as `leave()` does (`onLeave` stops the grains
     * still running first). The drain and the leave both need a key with the `operator` scope. It
     * leaves even when the drain could not be asked for (and then throws what the oracle said); a
     * death meanwhile ends it (`onDead`, no rejoin). Resolves how many activations remained when it
     * left.
     */
    stop(options?: StopOptions): Promise<number>;
    /**
     * Leaves at once, without draining: stops heartbeating, stops the grains still running
     * (`onLeave`), then `DELETE …/silos/{silo}` (a key with the `operator` scope) releases their
     * registrations, so that they are placed anew on their next call.
     */
    leave(): Promise<void>;
    /**
     * From now on a death ends the silo instead of rejoining it. Returns the incarnation that is
     * stopping: the one the leave is for, whatever happens meanwhile.
     */
    private beginStopping;
    /**
     * Stops heartbeating and makes sure no grain runs before the `DELETE`: the oracle places the
     * silo's grains anew the moment it answers, so one still running here would run twice.
     */
    private leaveAs;
    /** Stops heartbeating without leaving (the oracle will judge the silence). */
    close(): Promise<void>;
}
