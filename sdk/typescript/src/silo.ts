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
 * remains or at a deadline.
 */

import { Backoff } from "./backoff.js";
import { monotonic, type Clock } from "./clock.js";
import type { OracleClient } from "./client.js";
import { OracleError } from "./errors.js";
import { Lease } from "./lease.js";
import type { Logger } from "./logger.js";
import { sleep } from "./sleep.js";
import type { HeartbeatAnswer, Load, SiloView } from "./wire.js";

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
  /** Declared dead: drop every grain for good (the silo rejoins as the next generation). */
  onDead?: Hook;
  clock?: Clock;
  backoff?: Backoff;
  logger?: Logger;
  /** Heartbeats in flight at once, at most (4 by default); a round beyond it is skipped. */
  maxHeartbeatsInFlight?: number;
}

export interface StopOptions {
  /** How long to wait for the drain, ms (30 s by default); the silo leaves then regardless. */
  drainDeadlineMs?: number;
  /** Between reads of the drain's progress, ms. */
  pollMs?: number;
}

const nothing: Hook = () => {};

export class Silo {
  readonly client: OracleClient;
  readonly address: string;
  generation: number;
  /** What the next heartbeat reports. */
  status: ReportedStatus = "joining";
  lease = new Lease();
  /** How many times the oracle declared this silo dead. */
  deaths = 0;
  readonly intervalMs: number;
  readonly logger: Logger;
  private readonly load: () => Load | Promise<Load>;
  private readonly fixed: Record<string, unknown>;
  private readonly hooks: { onPause: Hook; onResume: Hook; onDead: Hook };
  private readonly clock: Clock;
  private readonly backoff: Backoff;
  private readonly maxInFlight: number;
  private readonly inFlight = new Set<Promise<void>>();
  private quietUntil = 0;
  /** Granted a lease since it (re)joined: only then do pause and resume mean anything. */
  private running = false;
  private paused = false;
  /** `onDead` is under way: the next incarnation's heartbeats wait until its grains are dropped. */
  private mourning = false;
  private timer: NodeJS.Timeout | undefined;
  private expiry: NodeJS.Timeout | undefined;

  constructor(client: OracleClient, address: string, options: SiloOptions = {}) {
    this.client = client;
    this.address = address;
    this.generation = options.generation ?? Date.now();
    this.load = options.load ?? (() => ({}));
    this.fixed = { address };
    if (options.grainTypes !== undefined) this.fixed["grain_types"] = [...options.grainTypes];
    if (options.role !== undefined) this.fixed["role"] = options.role;
    if (options.metadata !== undefined) this.fixed["metadata"] = { ...options.metadata };
    this.intervalMs = options.intervalMs ?? 1_000;
    this.hooks = {
      onPause: options.onPause ?? nothing,
      onResume: options.onResume ?? nothing,
      onDead: options.onDead ?? nothing,
    };
    this.clock = options.clock ?? monotonic;
    this.backoff = options.backoff ?? new Backoff();
    this.logger = options.logger ?? client.logger;
    this.maxInFlight = options.maxHeartbeatsInFlight ?? 4;
  }

  /** `address@generation`: the incarnation the oracle knows. */
  get siloId(): string {
    return `${this.address}@${this.generation}`;
  }

  /** Monotonic ms before which the timer sends no heartbeat (what `Retry-After` asked). */
  get nextHeartbeatAt(): number {
    return this.quietUntil;
  }

  /** Whether the silo holds its lease now: run grains only while this is true. */
  mayRunGrains(): boolean {
    return this.lease.holds(this.clock());
  }

  /**
   * As `mayRunGrains`, and the silo is still incarnation `silo`: a claim made before the silo was
   * declared dead and rejoined is not the new incarnation's to run.
   */
  mayRunGrainsAs(silo: string): boolean {
    return this.siloId === silo && this.mayRunGrains();
  }

  /**
   * Joins (one `joining` heartbeat, then `active`) and starts the timer. A silo told it is dead on
   * the way rejoins as the next generation; a 429 or 503 is waited out until `timeoutMs`.
   */
  async join(options: { timeoutMs?: number } = {}): Promise<void> {
    const deadline = this.clock() + (options.timeoutMs ?? 10_000);
    for (;;) {
      try {
        await this.beat();
        if (this.status === "joining") {
          this.status = "active";
          await this.beat();
        }
        break;
      } catch (error) {
        if (!(error instanceof OracleError) || this.clock() >= deadline) throw error;
        if (error.problem === "silo-declared-dead") continue;
        if (!error.retryable) throw error;
        await sleep(this.backoff.nextDelay(error.retryAfter));
      }
    }
    this.startTimer();
  }

  /** One heartbeat, now. Throws what the oracle refused (a death is handled first). */
  async beat(): Promise<void> {
    await this.heartbeat();
  }

  /** Says whether the heartbeat was acknowledged for the incarnation that sent it. */
  private async heartbeat(): Promise<boolean> {
    // Taken before anything else: the lease may only be shorter than the oracle's, never longer.
    const sentAt = this.clock();
    const generation = this.generation;
    const silo = this.siloId;
    const body = { ...this.fixed, ...(await this.load()), silo, status: this.status };
    let answer;
    try {
      answer = await this.client.call<HeartbeatAnswer>("POST", "/heartbeats", { body });
    } catch (error) {
      if (error instanceof OracleError) {
        if (error.problem === "silo-declared-dead") {
          // A heartbeat of an incarnation already given up on says nothing about the new one.
          if (generation === this.generation) await this.declaredDead();
        } else if (error.retryable) {
          this.quietUntil = this.clock() + this.backoff.nextDelay(error.retryAfter);
        }
      }
      throw error;
    }
    if (generation !== this.generation) return false;
    this.backoff.reset();
    const now = this.clock();
    const lapsed = !this.lease.holds(now);
    if (!this.lease.grant(sentAt, answer.body.lease_ms, now)) return true;
    if (this.running && lapsed) {
      if (!this.paused) {
        // It ran out between two looks: say so, so that the hooks always come in pairs.
        await this.pause();
      }
      this.paused = false;
      this.logger.info(`silo ${this.siloId} holds its lease again: grains resume`);
      await this.hook("onResume");
    }
    this.running = true;
    this.armExpiry();
    return true;
  }

  private async declaredDead(): Promise<void> {
    const old = this.siloId;
    this.status = "joining";
    this.lease = new Lease();
    this.deaths += 1;
    this.generation += 1;
    this.running = false;
    this.paused = false;
    clearTimeout(this.expiry);
    this.logger.warn(`silo ${old} was declared dead: its grains are dropped; rejoining as ${this.siloId}`);
    this.mourning = true;
    try {
      await this.hook("onDead");
    } finally {
      this.mourning = false;
    }
  }

  private startTimer(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.armExpiry();
  }

  private tick(): void {
    if (!this.mourning && this.clock() >= this.quietUntil && this.inFlight.size < this.maxInFlight) {
      // Each heartbeat on its own: a slow one does not hold back the next.
      const beat: Promise<void> = this.beatQuietly().finally(() => this.inFlight.delete(beat));
      this.inFlight.add(beat);
    }
    this.checkLease();
  }

  private async beatQuietly(): Promise<void> {
    try {
      if ((await this.heartbeat()) && this.status === "joining") {
        this.status = "active";
      }
    } catch (error) {
      if (error instanceof OracleError) {
        this.logger.debug(`heartbeat of ${this.siloId}: ${error.message}`);
      } else {
        this.logger.warn(`heartbeat of ${this.siloId} failed: ${String(error)}`);
      }
    }
  }

  /** Wakes when the lease would run out, so that grains pause then rather than a round later. */
  private armExpiry(): void {
    clearTimeout(this.expiry);
    if (this.timer === undefined) return;
    const wait = Math.ceil(this.lease.remaining(this.clock())) + 1;
    this.expiry = setTimeout(() => this.checkLease(), wait);
  }

  private checkLease(): void {
    if (this.running && !this.paused && !this.mayRunGrains()) {
      void this.pause();
    }
  }

  private async pause(): Promise<void> {
    this.paused = true;
    this.logger.warn(`silo ${this.siloId} lost its lease: grains pause`);
    await this.hook("onPause");
  }

  private async hook(name: "onPause" | "onResume" | "onDead"): Promise<void> {
    try {
      await this.hooks[name]();
    } catch (error) {
      this.logger.warn(`${name} of silo ${this.siloId} threw: ${String(error)}`);
    }
  }

  /**
   * Drains and leaves: asks the oracle to move every grain away (carried out by the silo's
   * `MigrationWorker`, which must keep running), heartbeating as `shutting_down` meanwhile, waits
   * until none remains or the deadline, then leaves. Returns how many activations remained when it
   * left.
   */
  async stop(options: StopOptions = {}): Promise<number> {
    const path = `/silos/${encodeURIComponent(this.siloId)}`;
    const pollMs = options.pollMs ?? 200;
    this.status = "shutting_down";
    let remaining = -1;
    try {
      await this.client.call("POST", `${path}/drain`);
      const deadline = this.clock() + (options.drainDeadlineMs ?? 30_000);
      while (this.clock() < deadline) {
        const silo = await this.client.call<SiloView>("GET", path);
        remaining = silo.body.drain?.remaining_activations ?? 0;
        if (remaining === 0) break;
        await sleep(pollMs);
      }
    } finally {
      await this.close();
    }
    await this.client.call("DELETE", path);
    return Math.max(remaining, 0);
  }

  /** Stops heartbeating without leaving (the oracle will judge the silence). */
  async close(): Promise<void> {
    clearInterval(this.timer);
    clearTimeout(this.expiry);
    this.timer = undefined;
    this.expiry = undefined;
    await Promise.allSettled([...this.inFlight]);
  }
}
