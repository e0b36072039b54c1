import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { OracleClient, Placement, Silo, connect, silentLogger, type PlacementAnswer } from "../../src/index.js";
import { fakeFetch, json, manualClock, problem } from "./fake.js";

function placed(grain: string, silo: string, epoch: number): PlacementAnswer {
  const address = silo.split("@")[0] ?? silo;
  return { grain, silo, address, epoch, outcome: "placed", strategy: "random", max_local: null, explanation: null };
}

describe("Placement", () => {
  test("claim asks as this silo and applies the registration rule", async () => {
    const fetch = fakeFetch(({ body }) => {
      const { grain } = body as { grain: string };
      return json(grain === "user/mine" ? placed(grain, "10.0.0.1:1@1", 4) : placed(grain, "10.0.0.2:1@1", 9));
    });
    const client = new OracleClient("http://a", "demo", { fetch, logger: silentLogger });
    const placement = new Placement(client, new Silo(client, "10.0.0.1:1", { generation: 1 }));
    assert.deepEqual(await placement.claim("user/mine"), { kind: "run-here", grain: "user/mine", epoch: 4, silo: "10.0.0.1:1@1" });
    assert.deepEqual(await placement.claim("user/other"), {
      kind: "forward-to",
      grain: "user/other",
      silo: "10.0.0.2:1@1",
      address: "10.0.0.2:1",
      epoch: 9,
    });
    assert.deepEqual(fetch.sent[0]?.body, { grain: "user/mine", requesting_silo: "10.0.0.1:1@1" });
    await assert.rejects(new Placement(client).claim("user/x"), TypeError);
  });

  test("locate keeps answers for a while, bounded, and forgets an epoch that is gone", async () => {
    let epoch = 1;
    const fetch = fakeFetch(({ body }) => json(placed((body as { grain: string }).grain, "10.0.0.1:1@1", epoch)));
    const time = manualClock(0);
    const client = new OracleClient("http://a", "demo", { fetch, logger: silentLogger });
    const caller = new Placement(client, undefined, { cacheTtlMs: 1_000, cacheEntries: 2, clock: time.clock });
    await caller.locate("user/a");
    await caller.locate("user/a");
    assert.equal(fetch.sent.length, 1, "the second answer came from the cache");
    caller.forget("user/a", 99);
    await caller.locate("user/a");
    assert.equal(fetch.sent.length, 1, "another epoch is not forgotten");
    epoch = 2;
    caller.forget("user/a", 1);
    assert.equal((await caller.locate("user/a")).epoch, 2);
    assert.equal(fetch.sent.length, 2);
    time.now = 1_000;
    await caller.locate("user/a");
    assert.equal(fetch.sent.length, 3, "an answer is kept for the TTL only");
    await caller.locate("user/b");
    await caller.locate("user/c");
    await caller.locate("user/a");
    assert.equal(fetch.sent.length, 6, "beyond two entries the oldest went");
  });

  test("locate keeps no stateless answer", async () => {
    const fetch = fakeFetch(() => json({ ...placed("worker/x", "10.0.0.1:1@1", 0), outcome: "stateless", epoch: null }));
    const caller = new Placement(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }));
    await caller.locate("worker/x");
    await caller.locate("worker/x");
    assert.equal(fetch.sent.length, 2);
  });

  test("release names the activation, and is false when it ended or moved", async () => {
    const answers = [new Response(null, { status: 204 }), problem(404, "not-found"), problem(409, "epoch-mismatch")];
    const fetch = fakeFetch(() => answers.shift() ?? problem(500, "internal"));
    const client = new OracleClient("http://a", "demo", { fetch, logger: silentLogger });
    const placement = new Placement(client, new Silo(client, "10.0.0.1:1", { generation: 1 }));
    assert.equal(await placement.release("user/a", 3), true);
    assert.equal(await placement.release("user/a", 3), false);
    assert.equal(await placement.release("user/a", 2), false);
    await assert.rejects(placement.release("user/a", 3), { status: 500 });
    const first = fetch.sent[0];
    assert.equal(first?.method, "DELETE");
    assert.equal(first?.url.pathname, "/v1/clusters/demo/activations/user%2Fa");
    assert.equal(first?.url.search, "?silo=10.0.0.1%3A1%401&epoch=3");
  });

  test("connect asks the pool", async () => {
    const fetch = fakeFetch(() =>
      json({ silo: "10.0.0.1:1@1", address: "10.0.0.1:1", rule: "round_robin", valid_for_ms: 0, explanation: null }),
    );
    const answer = await connect(new OracleClient("http://a", "demo", { fetch, logger: silentLogger }), "front door");
    assert.equal(answer.address, "10.0.0.1:1");
    assert.equal(fetch.sent[0]?.url.pathname, "/v1/clusters/demo/pools/front%20door/connections");
  });
});
