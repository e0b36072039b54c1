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
