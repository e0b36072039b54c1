import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { EdgeReporter, MigrationWorker, OracleClient, Silo, silentLogger, type Migration } from "../../src/index.js";
import { fakeFetch, json, problem, until } from "./fake.js";

function migration(id: number, grain: string): Migration {
  return { id, grain, from: "10.0.0.1:1@1", to: "10.0.0.2:1@1", reason: "drain", epoch: id, created_at_ms: 0 };
}

describe("MigrationWorker", () => {
  test("hands each over, then completes or fails it; one the oracle ended is done with", async () => {
    const open = [
      migration(1, "user/a"),
      migration(2, "user/b"),
      migration(3, "user/c"),
      migration(4, "user/d"),
      migration(5, "user/e"),
    ];
    const fetch = fakeFetch(({ method, url }) => {
      if (method === "GET") return json({ migrations: open, next_cursor: null });
      if (url.pathname.endsWith("/1/complete")) return json({ epoch: 11, migration: open[0] });
      if (url.pathname.endsWith("/2/fail")) return json({ migration: open[1] });
      if (url.pathname.endsWith("/3/complete")) return problem(409, "migration-ended");
      return problem(404, "not-found");
    });
    const client = new OracleClient("http://a", "demo", { fetch, logger: silentLogger });
    const silo = new Silo(client, "10.0.0.1:1", { generation: 1 });
    const moved: Array<[string, number]> = [];
    const refused: Array<[string, string]> = [];
    const worker = new MigrationWorker(
      client,
      silo,
      (m) => (m.grain === "user/e" ? null : m.grain !== "user/b"),
      {
        onMoved: (m, epoch) => moved.push([m.grain, epoch]),
        onRefused: (m, error) => refused.push([m.grain, error.problem]),
        logger: silentLogger,
      },
    );
    assert.equal(await worker.pollOnce(), 4, "the one still under way stays open");
    assert.deepEqual(moved, [["user/a", 11]]);
    assert.deepEqual(refused, [["user/c", "migration-ended"], ["user/d", "not-found"]]);
    assert.deepEqual([worker.completed, worker.failed, worker.refused], [1, 1, 2]);
    assert.equal(fetch.sent[0]?.url.search, "?silo=10.0.0.1%3A1%401");
    assert.ok(!fetch.sent.some(({ url }) => url.pathname.includes("/migrations/5/")), "nothing said of one under way");
  });

  test("any other refusal is thrown, and the timer's next round tries again", async () => {
    let refusals = 1;
    const fetch = fakeFetch(({ method }) => {
      if (method === "GET") return json({ migrations: [migration(1, "user/a")], next_cursor: null });
      return refusals-- > 0 ? problem(503, "store-unavailable") : json({ epoch: 2, migration: migration(1, "user/a") });
    });
    const client = new OracleClient("http://a", "demo", { fetch, logger: silentLogger });
    const worker = new MigrationWorker(client, new Silo(client, "10.0.0.1:1", { generation: 1 }), async () => true, {
      intervalMs: 1,
      logger: silentLogger,
    });
    await assert.rejects(worker.pollOnce(), { status: 503 });
    worker.start();
    await until("the next round completes it", () => worker.completed > 0);
    await worker.stop();
  });
});

describe("EdgeReporter", () => {
  test("reports in batches within the limit, and puts back what the oracle did not take", async () => {
    let refuseFrom = 2;
    const fetch = fakeFetch(({ body }) => {
      const { edges } = body as { edges: unknown[] };
      assert.ok(edges.length <= 10_000);
      if (refuseFrom-- > 0) return json({ accepted: edges.length, ignored: 0, dropped: 0 }, 202);
      return problem(429, "rate-limited", "1");
    });
    const reporter = new EdgeReporter(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), {
      maxPairs: 30_000,
      logger: silentLogger,
    });
    for (let i = 0; i < 25_000; i++) reporter.recordCall(`user/${i}`, `order/${i}`);
    reporter.recordCall("order/0", "user/0", 4);
    await assert.rejects(reporter.reportOnce(), { status: 429 });
    assert.equal(reporter.reported, 20_000);
    assert.equal(reporter.counter.size, 5_000, "the batch refused is counted again");
    refuseFrom = 1;
    assert.equal(await reporter.reportOnce(), 5_000);
    assert.equal(reporter.counter.size, 0);
    assert.deepEqual((fetch.sent[0]?.body as { edges: unknown[] }).edges[0], { from: "order/0", to: "user/0", count: 5 });
  });

  test("a report the oracle refused as such is dropped and counted, not sent again", async () => {
    const fetch = fakeFetch(() => problem(422, "invalid-input"));
    const reporter = new EdgeReporter(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), {
      logger: silentLogger,
    });
    reporter.recordCall("user/a", "user/b", 3);
    await assert.rejects(reporter.reportOnce(), { status: 422 });
    assert.equal(reporter.counter.size, 0);
    assert.equal(reporter.counter.dropped, 3);
  });
});
