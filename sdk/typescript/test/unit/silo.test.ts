import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { OracleClient, OracleError, Silo, silentLogger } from "../../src/index.js";
import { fakeFetch, json, manualClock, problem, until, type Sent } from "./fake.js";

function heartbeatBody(request: Sent): { silo: string; status: string } {
  return request.body as { silo: string; status: string };
}

describe("Silo", () => {
  test("told dead, it drops its grains and rejoins as the next generation", async () => {
    const time = manualClock(100_000);
    const fetch = fakeFetch((request) => {
      const body = heartbeatBody(request);
      if (body.silo === "10.0.0.1:1@5" && fetch.sent.length > 2) return problem(409, "silo-declared-dead");
      return json({ silo: body.silo, status: body.status, lease_ms: 9_000 });
    });
    const dropped: string[] = [];
    const client = new OracleClient("http://a", "demo", { fetch, logger: silentLogger });
    const silo = new Silo(client, "10.0.0.1:1", {
      generation: 5,
      clock: time.clock,
      onDead: () => {
        dropped.push("dead");
      },
    });
    await silo.beat();
    silo.status = "active";
    await silo.beat();
    assert.equal(silo.mayRunGrains(), true);

    time.now = 103_000;
    await assert.rejects(silo.beat(), { problem: "silo-declared-dead" });
    assert.deepEqual(dropped, ["dead"]);
    assert.equal(silo.mayRunGrains(), false, "a dead incarnation holds no lease");
    assert.equal(silo.siloId, "10.0.0.1:1@6");
    assert.equal(silo.status, "joining");
    assert.equal(silo.deaths, 1);

    await silo.beat();
    assert.equal(silo.mayRunGrains(), true);
    assert.equal(silo.mayRunGrainsAs("10.0.0.1:1@6"), true);
    assert.equal(silo.mayRunGrainsAs("10.0.0.1:1@5"), false, "a claim of the dead incarnation is not run");
    assert.deepEqual(heartbeatBody(fetch.sent.at(-1) as Sent), {
      address: "10.0.0.1:1",
      silo: "10.0.0.1:1@6",
      status: "joining",
    });
  });

  test("join rejoins at once as the next generation when its id was declared dead", async () => {
    const fetch = fakeFetch((request) => {
      const body = heartbeatBody(request);
      if (body.silo.endsWith("@1")) return problem(409, "silo-declared-dead");
      return json({ lease_ms: 9_000 });
    });
    const events: string[] = [];
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      onDead: () => {
        events.push("dead");
      },
    });
    await silo.join();
    await silo.close();
    assert.deepEqual(events, ["dead"]);
    assert.equal(silo.siloId, "10.0.0.1:1@2");
    assert.deepEqual(fetch.sent.map((request) => heartbeatBody(request).status), ["joining", "joining", "active"]);
  });

  test("the next incarnation heartbeats only once onDead has dropped the grains", async () => {
    let dead = false;
    const fetch = fakeFetch((request) =>
      dead && heartbeatBody(request).silo.endsWith("@1") ? problem(409, "silo-declared-dead") : json({ lease_ms: 9_000 }),
    );
    let dropped: () => void = () => {};
    const dropping = new Promise<void>((resolve) => {
      dropped = resolve;
    });
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 2,
      onDead: () => dropping,
    });
    await silo.join();
    try {
      dead = true;
      await until("declared dead", () => silo.deaths === 1);
      await new Promise((resolve) => setTimeout(resolve, 30));
      assert.ok(!fetch.sent.some((request) => heartbeatBody(request).silo.endsWith("@2")), "no heartbeat while grains drop");
      dropped();
      const statuses = (): string[] =>
        fetch.sent.filter((r) => heartbeatBody(r).silo.endsWith("@2")).map((r) => heartbeatBody(r).status);
      await until("rejoined and active", () => statuses().includes("active"));
      assert.equal(silo.siloId, "10.0.0.1:1@2");
      assert.ok(silo.mayRunGrains());
      assert.equal(statuses()[0], "joining", "it rejoins as joining first");
    } finally {
      await silo.close();
    }
  });

  test("a heartbeat answered for the incarnation before a death grants the new one nothing", async () => {
    let release: (response: Response) => void = () => {};
    const slow = new Promise<Response>((resolve) => {
      release = resolve;
    });
    const fetch = fakeFetch((request) => {
      if (fetch.sent.length === 1) return slow;
      return heartbeatBody(request).silo.endsWith("@1") ? problem(409, "silo-declared-dead") : json({ lease_ms: 9_000 });
    });
    let deaths = 0;
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      onDead: () => {
        deaths += 1;
      },
    });
    const late = silo.beat();
    await assert.rejects(silo.beat(), { problem: "silo-declared-dead" });
    release(json({ lease_ms: 9_000 }));
    await late;
    assert.equal(silo.mayRunGrains(), false, "the old incarnation's lease is not the new one's");
    assert.equal(deaths, 1);
  });

  test("a replica that never answers holds a heartbeat a third of the last lease at most", async () => {
    // The first replica acknowledges, then answers 503; the second takes the connection and never
    // answers (frozen, its VM paused); the third acknowledges. The lease is 900 ms and the client
    // waits 2 s: the third must be asked about 300 ms after the second, not 2 s.
    let refusing = false;
    const fetch = fakeFetch((request) => {
      if (request.url.hostname === "a") return refusing ? problem(503, "store-unavailable") : json({ lease_ms: 900 });
      if (request.url.hostname === "c") return json({ lease_ms: 900 });
      return new Promise<Response>((_, reject) => {
        request.signal?.addEventListener("abort", () => reject(request.signal?.reason));
      });
    });
    const client = new OracleClient(["http://a", "http://frozen", "http://c"], "demo", {
      fetch,
      logger: silentLogger,
      timeoutMs: 2_000,
    });
    const silo = new Silo(client, "10.0.0.1:1", { generation: 1 });
    // AbortSignal.timeout's timer does not hold the event loop open; a real socket would.
    const keepAlive = setInterval(() => {}, 1_000);
    await silo.beat();
    refusing = true;
    await silo.beat();
    clearInterval(keepAlive);
    const frozen = fetch.sent.find((r) => r.url.hostname === "frozen");
    const third = fetch.sent.find((r) => r.url.hostname === "c");
    assert.ok(frozen && third);
    const waited = third.at - frozen.at;
    assert.ok(waited < 1_000, `waited ${waited} ms for the frozen replica`);
    assert.equal(silo.mayRunGrains(), true);
  });

  test("without an acknowledgement the lease runs out; Retry-After holds back the next heartbeat", async () => {
    const time = manualClock(0);
    const answers = [json({ lease_ms: 9_000 }), problem(503, "store-unavailable", "1")];
    const client = new OracleClient("http://a", "demo", {
      fetch: fakeFetch(() => answers.shift() ?? problem(503, "store-unavailable")),
      logger: silentLogger,
    });
    const silo = new Silo(client, "10.0.0.1:1", { generation: 1, clock: time.clock });
    await silo.beat();
    time.now = 5_000;
    await assert.rejects(silo.beat(), (error: unknown) => error instanceof OracleError && error.retryable);
    assert.equal(silo.mayRunGrains(), true, "the lease held still runs");
    time.now = 9_000;
    assert.equal(silo.mayRunGrains(), false, "paused when it runs out");
    assert.equal(silo.nextHeartbeatAt, 6_000, "the next heartbeat waits as Retry-After said");
  });

  test("a lapsed lease calls onPause; the next acknowledgement calls onResume", async () => {
    const time = manualClock(0);
    let up = true;
    const fetch = fakeFetch(() => (up ? json({ lease_ms: 9_000 }) : problem(503, "store-unavailable")));
    const events: string[] = [];
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 5,
      clock: time.clock,
      onPause: () => {
        events.push("pause");
      },
      onResume: () => {
        events.push("resume");
      },
      onDead: () => {
        events.push("dead");
      },
    });
    await silo.join();
    try {
      up = false;
      time.now = 8_000;
      const before = fetch.sent.length;
      await until("a heartbeat fails", () => fetch.sent.length > before);
      assert.deepEqual(events, [], "within the lease nothing pauses");
      time.now = 9_000;
      await until("grains pause", () => events.length === 1);
      assert.equal(silo.mayRunGrains(), false);
      up = true;
      time.now = 12_000; // past any backoff (capped at 2 s)
      await until("grains resume", () => events.length === 2);
      assert.equal(silo.mayRunGrains(), true);
      assert.deepEqual(events, ["pause", "resume"]);
    } finally {
      await silo.close();
    }
  });

  test("an acknowledgement that comes after its own lease ran out does not resume", async () => {
    const time = manualClock(0);
    const events: string[] = [];
    const fetch = fakeFetch(() => {
      if (fetch.sent.length <= 2) return json({ lease_ms: 1_000 });
      time.now += 2_000; // the answer takes longer than the lease
      return json({ lease_ms: 1_000 });
    });
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      clock: time.clock,
      onResume: () => {
        events.push("resume");
      },
    });
    await silo.beat();
    await silo.beat();
    time.now = 1_500;
    await silo.beat();
    assert.equal(silo.mayRunGrains(), false);
    assert.deepEqual(events, []);
  });

  test("stop drains, waits for the grains to go, stops heartbeating and leaves", async () => {
    let remaining = 2;
    const fetch = fakeFetch(({ method, url }) => {
      if (url.pathname.endsWith("/heartbeats")) return json({ lease_ms: 9_000 });
      if (method === "POST" && url.pathname.endsWith("/drain")) return json({ migrations: [] });
      if (method === "GET") {
        remaining = Math.max(0, remaining - 1);
        const drain = { remaining_activations: remaining, migrating: remaining, requested_at_ms: 1 };
        return json({ silo: "10.0.0.1:1@1", status: "shutting_down", drain });
      }
      return json({ silo: "10.0.0.1:1@1", status: "dead" });
    });
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 5,
    });
    await silo.join();
    assert.equal(await silo.stop({ pollMs: 1 }), 0);
    const calls = fetch.sent
      .filter(({ url }) => !url.pathname.endsWith("/heartbeats"))
      .map(({ method, url }) => `${method} ${url.pathname}`);
    assert.deepEqual(calls, [
      "POST /v1/clusters/demo/silos/10.0.0.1%3A1%401/drain",
      "GET /v1/clusters/demo/silos/10.0.0.1%3A1%401",
      "GET /v1/clusters/demo/silos/10.0.0.1%3A1%401",
      "DELETE /v1/clusters/demo/silos/10.0.0.1%3A1%401",
    ]);
    const beats = fetch.sent.length;
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(fetch.sent.length, beats, "no heartbeat after leaving");
  });
});

/** A fake oracle for a silo that stops: heartbeats acknowledged, the drain answered as given. */
function stoppingOracle(drain: () => Response, remaining: () => number) {
  return fakeFetch(({ method, url }) => {
    if (url.pathname.endsWith("/heartbeats")) return json({ lease_ms: 9_000 });
    if (method === "POST" && url.pathname.endsWith("/drain")) return drain();
    if (method === "GET") {
      const left = remaining();
      return json({ silo: "10.0.0.1:1@1", status: "shutting_down", drain: { remaining_activations: left, migrating: left, requested_at_ms: 1 } });
    }
    return json({ silo: "10.0.0.1:1@1", released_activations: 0, release_pending: false });
  });
}

const SILO_PATH = "/v1/clusters/demo/silos/10.0.0.1%3A1%401";

function calls(sent: readonly Sent[]): string[] {
  return sent.filter(({ url }) => !url.pathname.endsWith("/heartbeats")).map(({ method, url }) => `${method} ${url.pathname}`);
}

describe("Silo leaving", () => {
  test("at the drain deadline the grains still running stop, and may not run, before the leave", async () => {
    const fetch = stoppingOracle(() => json({ migrations: [] }), () => 3);
    const seen: { mayRun: boolean; sent: number }[] = [];
    const silo: Silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 5,
      onLeave: () => {
        seen.push({ mayRun: silo.mayRunGrainsAs("10.0.0.1:1@1"), sent: fetch.sent.length });
      },
    });
    await silo.join();
    assert.equal(silo.mayRunGrains(), true);
    assert.equal(await silo.stop({ drainDeadlineMs: 30, pollMs: 5 }), 3, "how many remained when it left");
    assert.equal(seen.length, 1);
    assert.equal(seen[0]?.mayRun, false, "no grain may run once it is leaving");
    assert.deepEqual(calls(fetch.sent.slice(seen[0]?.sent)), [`DELETE ${SILO_PATH}`], "onLeave comes before the DELETE");
    assert.equal(silo.mayRunGrains(), false, "nor after: the lease it still holds is no longer its to run");
  });

  test("the leave is sent even when the drain is refused", async () => {
    const fetch = stoppingOracle(() => problem(403, "forbidden"), () => 0);
    const events: string[] = [];
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 5,
      onLeave: () => {
        events.push("leave");
      },
    });
    await silo.join();
    await assert.rejects(silo.stop(), { status: 403, problem: "forbidden" }, "what the drain was told is what stop throws");
    assert.deepEqual(calls(fetch.sent), [`POST ${SILO_PATH}/drain`, `DELETE ${SILO_PATH}`]);
    assert.deepEqual(events, ["leave"]);
    assert.equal(silo.mayRunGrains(), false);
  });

  test("leave stops the grains and leaves at once, without a drain, and heartbeats no more", async () => {
    const fetch = stoppingOracle(() => json({}), () => 0);
    const events: string[] = [];
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 2,
      onLeave: () => {
        events.push("leave");
      },
    });
    await silo.join();
    await silo.leave();
    assert.deepEqual(events, ["leave"]);
    assert.deepEqual(calls(fetch.sent), [`DELETE ${SILO_PATH}`]);
    const sent = fetch.sent.length;
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(fetch.sent.length, sent, "no heartbeat after leaving");
    assert.equal(silo.mayRunGrains(), false);
  });

  test("a death while stopping ends it: no rejoin, and the leave goes to the incarnation that stopped", async () => {
    let dead = false;
    const fetch = fakeFetch(({ method, url, body }) => {
      if (url.pathname.endsWith("/heartbeats")) {
        return dead ? problem(409, "silo-declared-dead") : json({ silo: (body as { silo: string }).silo, lease_ms: 9_000 });
      }
      if (method === "POST") {
        dead = true; // the oracle judges the silo dead while it drains
        return json({ migrations: [] });
      }
      if (method === "GET") return json({ silo: "10.0.0.1:1@1", status: "shutting_down", drain: { remaining_activations: 5 } });
      return json({ silo: "10.0.0.1:1@1", released_activations: 0, release_pending: false });
    });
    const events: string[] = [];
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 2,
      onDead: () => {
        events.push("dead");
      },
      onLeave: () => {
        events.push("leave");
      },
    });
    await silo.join();
    const started = performance.now();
    await silo.stop({ drainDeadlineMs: 10_000, pollMs: 2 });
    assert.ok(performance.now() - started < 5_000, "the death ended the wait for the drain");
    assert.deepEqual(events, ["dead"], "its grains were dropped once; nothing is left to stop");
    assert.equal(silo.deaths, 1);
    assert.equal(silo.siloId, "10.0.0.1:1@1", "no next generation");
    const heartbeats = fetch.sent.filter(({ url }) => url.pathname.endsWith("/heartbeats"));
    assert.ok(!heartbeats.some((request) => heartbeatBody(request).silo.endsWith("@2")), "nothing sent for a next generation");
    assert.equal(calls(fetch.sent).at(-1), `DELETE ${SILO_PATH}`);
    assert.equal(silo.mayRunGrains(), false);
  });
});

/** A logger that keeps the warnings, to see that what a hook threw was said. */
function keptWarnings(): { warnings: string[]; logger: typeof silentLogger } {
  const warnings: string[] = [];
  return { warnings, logger: { ...silentLogger, warn: (message: string) => void warnings.push(message) } };
}

describe("Silo hooks that throw", () => {
  test("an onPause that throws does not stop the silo's timers: it resumes", async () => {
    let up = true;
    const fetch = fakeFetch(() => (up ? json({ lease_ms: 100 }) : problem(503, "store-unavailable")));
    const events: string[] = [];
    const { warnings, logger } = keptWarnings();
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 5,
      logger,
      onPause: () => {
        events.push("pause");
        throw new Error("the runtime's bug");
      },
      onResume: async () => {
        events.push("resume");
      },
    });
    await silo.join();
    try {
      up = false;
      await until("paused", () => events.length === 1);
      up = true;
      await until("resumed after the hook threw", () => events.length === 2);
      assert.deepEqual(events, ["pause", "resume"]);
      assert.equal(silo.mayRunGrains(), true);
      assert.ok(warnings.some((w) => w.startsWith("onPause of silo 10.0.0.1:1@1 threw")), warnings.join("\n"));
    } finally {
      await silo.close();
    }
  });

  test("an onDead that rejects still rejoins, and a load that throws still heartbeats", async () => {
    const fetch = fakeFetch((request) =>
      heartbeatBody(request).silo.endsWith("@1") ? problem(409, "silo-declared-dead") : json({ lease_ms: 9_000 }),
    );
    const { warnings, logger } = keptWarnings();
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      logger,
      load: () => {
        throw new Error("no load figures today");
      },
      onDead: () => Promise.reject(new Error("could not drop")),
    });
    await assert.rejects(silo.beat(), { problem: "silo-declared-dead" });
    assert.equal(await silo.beat(), true, "the next generation heartbeats");
    assert.equal(silo.mayRunGrainsAs("10.0.0.1:1@2"), true);
    assert.deepEqual(heartbeatBody(fetch.sent.at(-1) as Sent), { address: "10.0.0.1:1", silo: "10.0.0.1:1@2", status: "joining" });
    assert.ok(warnings.some((w) => w.startsWith("onDead of silo")), warnings.join("\n"));
    assert.ok(warnings.some((w) => w.startsWith("load of silo")), warnings.join("\n"));
  });

  test("an onLeave that throws still leaves", async () => {
    const fetch = stoppingOracle(() => json({}), () => 0);
    const { warnings, logger } = keptWarnings();
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      logger,
      onLeave: () => {
        throw new Error("could not stop");
      },
    });
    await silo.leave();
    assert.deepEqual(calls(fetch.sent), [`DELETE ${SILO_PATH}`]);
    assert.equal(silo.mayRunGrains(), false);
    assert.ok(warnings.some((w) => w.startsWith("onLeave of silo")));
  });
});

describe("Silo heartbeat answers", () => {
  test("Retry-After never keeps a silo quiet for more than half the lease it holds", async () => {
    const time = manualClock(0);
    const answers = [json({ lease_ms: 9_000 }), problem(429, "rate-limited", "30")];
    const client = new OracleClient("http://a", "demo", {
      fetch: fakeFetch(() => answers.shift() ?? problem(503, "store-unavailable")),
      logger: silentLogger,
    });
    const silo = new Silo(client, "10.0.0.1:1", { generation: 1, intervalMs: 1_000, clock: time.clock });
    await silo.beat();
    time.now = 1_000;
    await assert.rejects(silo.beat(), { status: 429 });
    assert.equal(silo.nextHeartbeatAt, 1_000 + 4_000, "half of the 8 s it still holds, not 30 s");
  });

  test("without a lease, Retry-After is held to the interval", async () => {
    const time = manualClock(0);
    const client = new OracleClient("http://a", "demo", {
      fetch: fakeFetch(() => problem(503, "overloaded", "30")),
      logger: silentLogger,
    });
    const silo = new Silo(client, "10.0.0.1:1", { generation: 1, intervalMs: 2_000, clock: time.clock });
    await assert.rejects(silo.beat(), { status: 503 });
    assert.equal(silo.nextHeartbeatAt, 2_000);
  });

  test("a 200 without a numeric lease_ms is an unexpected answer and grants nothing", async () => {
    const answers: (() => Response)[] = [
      () => json({ silo: "10.0.0.1:1@1" }),
      () => json({ lease_ms: "9000" }),
      () => json({ lease_ms: null }),
      () => json([9_000]),
      () => json(null),
      () => new Response(null, { status: 200 }),
    ];
    for (const answer of answers) {
      const client = new OracleClient("http://a", "demo", { fetch: fakeFetch(answer), logger: silentLogger });
      const silo = new Silo(client, "10.0.0.1:1", { generation: 1 });
      await assert.rejects(silo.beat(), (error: unknown) => {
        assert.ok(error instanceof OracleError, String(error));
        assert.equal(error.status, 0);
        assert.equal(error.problem, "unexpected-answer");
        return true;
      });
      assert.equal(silo.mayRunGrains(), false);
    }
  });

  test("an answer for the incarnation before a death does not make the next one active", async () => {
    let release: (response: Response) => void = () => {};
    const slow = new Promise<Response>((resolve) => {
      release = resolve;
    });
    const fetch = fakeFetch((request) => {
      if (fetch.sent.length === 1) return slow; // the timer's heartbeat of generation 1, on its way
      return heartbeatBody(request).silo.endsWith("@1") ? problem(409, "silo-declared-dead") : json({ lease_ms: 9_000 });
    });
    const silo = new Silo(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "10.0.0.1:1", {
      generation: 1,
      intervalMs: 60_000,
    });
    const internals = silo as unknown as { beatQuietly(): Promise<void> };
    silo.status = "active";
    const late = internals.beatQuietly();
    await assert.rejects(silo.beat(), { problem: "silo-declared-dead" });
    release(json({ lease_ms: 9_000 }));
    await late;
    assert.equal(silo.siloId, "10.0.0.1:1@2");
    assert.equal(silo.status, "joining", "generation 2 goes active on its own acknowledgement only");
    assert.equal(await silo.beat(), true);
  });
});
