import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { decide, type PlacementAnswer } from "../../src/index.js";

const answer: PlacementAnswer = {
  grain: "user/a",
  silo: "10.0.0.1:1@1",
  address: "10.0.0.1:1",
  epoch: 7,
  outcome: "placed",
  strategy: "resource_optimized",
  max_local: null,
  explanation: null,
};

describe("the registration rule", () => {
  test("its own id means run here under that epoch", () => {
    assert.deepEqual(decide("10.0.0.1:1@1", answer), { kind: "run-here", grain: "user/a", epoch: 7, silo: "10.0.0.1:1@1" });
    assert.deepEqual(decide("10.0.0.1:1@1", { ...answer, outcome: "existing" }), {
      kind: "run-here",
      grain: "user/a",
      epoch: 7,
      silo: "10.0.0.1:1@1",
    });
  });

  test("another silo means forward, even the same address of an older generation", () => {
    assert.deepEqual(decide("10.0.0.1:1@2", answer), {
      kind: "forward-to",
      grain: "user/a",
      silo: "10.0.0.1:1@1",
      address: "10.0.0.1:1",
      epoch: 7,
    });
  });

  test("a stateless worker runs anywhere", () => {
    const stateless: PlacementAnswer = { ...answer, outcome: "stateless", epoch: null };
    assert.deepEqual(decide("10.0.0.9:1@1", stateless), { kind: "run-here", grain: "user/a", epoch: null, silo: "10.0.0.9:1@1" });
  });

  test("a registered activation without an epoch is refused, not run", () => {
    assert.throws(() => decide("10.0.0.1:1@1", { ...answer, epoch: null }), TypeError);
  });
});
