/**
 * The SDK against a real oracle on Postgres: a process of the oracle's binary started here, alone on
 * its database, so that it can be killed and started again (an oracle outage). Three SDK silos go
 * through placements and the registration rule, a deactivation, edge reports, a drain whose
 * migrations a worker hands over, the oracle gone for longer than their leases (paused, resumed,
 * none dead), and a silo declared dead that rejoins as its next generation.
 *
 *     npm run build && \
 *     ORACLE_BINARY=$PWD/../../target/debug/placement-oracle \
 *     ORACLE_SDK_DATABASE_URL=postgres://postgres@127.0.0.1:5432/oracle_sdk_ts \
 *     npm run test:integration
 *
 * Without ORACLE_BINARY it fails, it does not skip: the contract suite always sets it, and a
 * silent skip there would hide a broken SDK.
 */

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import {
  EdgeReporter,
  MigrationWorker,
  OracleClient,
  Placement,
  Silo,
  type Migration,
  type PlacementAnswer,
  type SiloView,
} from "../src/index.js";

const TTL_MS = 3_000;
const ADMIN = randomBytes(32).toString("hex");

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  assert.ok(address !== null && typeof address === "object");
  return address.port;
}

/** Waits until `check` holds; resolves how long that took, in seconds. */
async function until(what: string, check: () => boolean | Promise<boolean>, withinS = 15): Promise<number> {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > withinS * 1000) {
      throw new Error(`${what}: not within ${withinS} s`);
    }
    await sleep(50);
  }
  return (performance.now() - started) / 1000;
}

function required(name: string): string {
  const value = process.env[name];
  assert.ok(value, `${name} must be set (the contract suite sets it); this test does not skip without it`);
  return value;
}

class OracleProcess {
  readonly base: string;
  readonly logPath: string;
  private process: ChildProcess | undefined;

  constructor(
    readonly binary: string,
    readonly databaseUrl: string,
    readonly port: number,
  ) {
    this.base = `http://127.0.0.1:${port}`;
    this.logPath = join(mkdtempSync(join(tmpdir(), "oracle-sdk-ts-")), "oracle.log");
  }

  async start(): Promise<void> {
    const log = openSync(this.logPath, "a");
    const child = spawn(this.binary, [], {
      env: {
        PATH: process.env["PATH"] ?? "",
        DATABASE_URL: this.databaseUrl,
        ORACLE_LISTEN: `127.0.0.1:${this.port}`,
        ORACLE_ADMIN_TOKEN: ADMIN,
        ORACLE_LEASE_TTL_MS: "1000",
        RUST_LOG: "warn",
      },
      stdio: ["ignore", log, log],
    });
    closeSync(log);
    this.process = child;
    let exited = false;
    child.once("exit", () => {
      exited = true;
    });
    try {
      await until("the oracle is ready", async () => {
        if (exited) throw new Error(`the oracle exited; its log:\n${readFileSync(this.logPath, "utf8")}`);
        return this.ready();
      }, 30);
    } catch (error) {
      await this.kill();
      throw error;
    }
  }

  private async ready(): Promise<boolean> {
    try {
      const response = await fetch(`${this.base}/readyz`, { signal: AbortSignal.timeout(1_000) });
      await response.body?.cancel();
      return response.status === 200;
    } catch {
      return false;
    }
  }

  /** SIGKILL: no graceful shutdown, as in a crash. */
  async kill(): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }
}

async function admin<T = unknown>(
  base: string,
  method: string,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<T> {
  const response = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  assert.ok(response.status < 300, `${method} ${path}: ${response.status} ${text}`);
  return JSON.parse(text) as T;
}

test("a cluster of SDK silos through placements, a drain, an oracle outage and a death", async () => {
  const oracle = new OracleProcess(
    required("ORACLE_BINARY"),
    required("ORACLE_SDK_DATABASE_URL"),
    await freePort(),
  );
  await oracle.start();
  const silos: Silo[] = [];
  try {
    const cluster = `sdk-ts-${process.pid}`;
    const issued = await admin<{ key: string }>(oracle.base, "POST", `/v1/clusters/${cluster}/keys`, {
      scopes: ["silo", "operator"],
    });
    const client = new OracleClient(oracle.base, cluster, { key: issued.key, timeoutMs: 1_000 });
    await admin(oracle.base, "PUT", `/v1/clusters/${cluster}/policy`, { silo_ttl_ms: TTL_MS }, { "if-match": "*" });

    const events: Record<string, string[]> = { a: [], b: [], c: [] };
    const silo = (name: string, n: number): Silo =>
      new Silo(client, `10.0.0.${n}:11111`, {
        generation: 1,
        intervalMs: 250,
        load: () => ({ cpu_usage: 10 }),
        onPause: () => void events[name]?.push("pause"),
        onResume: () => void events[name]?.push("resume"),
        onDead: () => void events[name]?.push("dead"),
        onLeave: () => void events[name]?.push("leave"),
      });
    const [a, b, c] = [silo("a", 1), silo("b", 2), silo("c", 3)];
    silos.push(a, b, c);
    for (const s of silos) {
      await s.join();
      assert.ok(s.mayRunGrains(), `${s.siloId} holds its lease once joined`);
    }
    const placements = new Map(silos.map((s) => [s.siloId, new Placement(client, s)]));
    const placementOf = (silo: string): Placement => {
      const placement = placements.get(silo);
      assert.ok(placement, `a placement on ${silo}, one of the SDK's silos`);
      return placement;
    };
    const caller = new Placement(client);

    // Placement: the silo named holds the registration; any other forwards to it.
    const grains = Array.from({ length: 30 }, (_, i) => `user/${i}`);
    const where = new Map<string, { silo: string; epoch: number }>();
    for (const grain of grains) {
      const answer = await caller.locate(grain);
      assert.ok(answer.epoch !== null);
      assert.deepEqual(await placementOf(answer.silo).claim(grain), { kind: "run-here", grain, epoch: answer.epoch, silo: answer.silo });
      const other = silos.find((s) => s.siloId !== answer.silo);
      assert.ok(other);
      assert.equal((await placementOf(other.siloId).claim(grain)).kind, "forward-to");
      where.set(grain, { silo: answer.silo, epoch: answer.epoch });
    }

    // A deactivation ends that epoch only; the grain is placed anew with a larger one.
    const first = where.get("user/0");
    assert.ok(first);
    assert.equal(await placementOf(first.silo).release("user/0", first.epoch), true);
    assert.equal(await placementOf(first.silo).release("user/0", first.epoch), false, "already ended");
    caller.forget("user/0", first.epoch);
    const again = await caller.locate("user/0");
    assert.ok(again.epoch !== null && again.epoch > first.epoch, "placed anew with a larger epoch");
    where.set("user/0", { silo: again.silo, epoch: again.epoch });

    // Edge reports.
    const edges = new EdgeReporter(client);
    for (let i = 0; i < 30; i += 2) {
      for (let k = 0; k < 3; k++) edges.recordCall(`user/${i}`, `user/${i + 1}`);
    }
    assert.equal(await edges.reportOnce(), 15);

    // A drain: c's grains are handed over by its worker, then c leaves.
    const handed: string[] = [];
    const worker = new MigrationWorker(
      client,
      c,
      async (migration: Migration) => {
        handed.push(migration.grain); // the runtime's state transfer goes here
        return true;
      },
      { intervalMs: 100 },
    );
    worker.start();
    const onC = new Set([...where].filter(([, at]) => at.silo === c.siloId).map(([grain]) => grain));
    assert.ok(onC.size > 0, "the test places some grains on c");
    assert.equal(await c.stop({ drainDeadlineMs: 20_000 }), 0, "c leaves with no activation left");
    assert.deepEqual(events["c"], ["leave"], "told to stop what still ran, before the leave");
    assert.equal(c.mayRunGrains(), false);
    const gone = await client.call<SiloView>("GET", `/silos/${encodeURIComponent(c.siloId)}`);
    assert.equal(gone.body.status, "dead", "it left");
    await worker.stop();
    assert.deepEqual(new Set(handed), onC);
    assert.equal(worker.completed, onC.size);
    for (const grain of onC) {
      const moved = (await client.call<PlacementAnswer>("GET", `/activations/${encodeURIComponent(grain)}`)).body;
      assert.notEqual(moved.silo, c.siloId);
      const before = where.get(grain)?.epoch ?? Infinity;
      assert.ok(moved.epoch !== null && moved.epoch > before, `${grain} moved as a new activation`);
    }

    // The oracle gone for longer than a lease: grains pause, then resume; no one dies.
    await oracle.kill();
    const paused = await until("a and b pause", () => !a.mayRunGrains() && !b.mayRunGrains());
    await oracle.start();
    const resumed = await until("a and b resume", () => a.mayRunGrains() && b.mayRunGrains());
    assert.deepEqual(events["a"], ["pause", "resume"], "a");
    assert.deepEqual(events["b"], ["pause", "resume"], "b");
    console.log(
      `oracle outage: leases ran out ${paused.toFixed(2)} s after the kill; ` +
        `resumed ${resumed.toFixed(2)} s after the restart`,
    );

    // b falls silent for longer than the TTL: declared dead; it drops its grains and rejoins.
    await b.close();
    const oldB = b.siloId;
    await until(
      "b is declared dead",
      async () => (await client.call<SiloView>("GET", `/silos/${encodeURIComponent(oldB)}`)).body.status === "dead",
      20,
    );
    await b.join();
    assert.equal(events["b"]?.at(-1), "dead");
    assert.equal(b.siloId, "10.0.0.2:11111@2");
    assert.ok(b.mayRunGrains());
    for (const grain of grains) {
      const answer = (await client.call<PlacementAnswer>("POST", "/placements", { body: { grain } })).body;
      assert.notEqual(answer.silo, oldB, "a dead silo's grains are placed anew");
    }

    for (const s of [a, b]) {
      await s.stop({ drainDeadlineMs: 500 });
    }
    assert.equal(events["a"]?.at(-1), "leave");
    assert.equal(events["b"]?.at(-1), "leave");
  } finally {
    await Promise.all(silos.map((s) => s.close()));
    await oracle.kill();
  }
});
