import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { EdgeCounter, MAX_COUNT, MAX_EDGES_PER_REPORT, MAX_REPORT_BYTES } from "../../src/index.js";

describe("EdgeCounter", () => {
  test("a pair and its reverse are one edge, and self-calls are left out", () => {
    const edges = new EdgeCounter();
    edges.record("user/a", "user/b");
    edges.record("user/b", "user/a", 2);
    edges.record("user/a", "user/a");
    edges.record("user/a", "user/b", 0);
    assert.deepEqual(edges.takeBatches(), [[{ from: "user/a", to: "user/b", count: 3 }]]);
    assert.deepEqual(edges.takeBatches(), [], "taking empties it");
  });

  test("memory stays bounded and what does not fit is counted as dropped", () => {
    const edges = new EdgeCounter(100);
    for (let i = 0; i < 250; i++) edges.record(`user/${i}`, "user/hub");
    edges.record("user/0", "user/hub", 5);
    edges.record("user/200", "user/hub", 7);
    assert.equal(edges.size, 100);
    assert.equal(edges.dropped, 150 + 7);
    const [batch] = edges.takeBatches();
    assert.ok(batch?.some((edge) => edge.count === 6), "a kept pair keeps counting");
    assert.equal(batch?.length, 100);
  });

  test("a count stops at the oracle's largest", () => {
    const edges = new EdgeCounter();
    edges.record("user/a", "user/b", MAX_COUNT - 1);
    edges.record("user/b", "user/a", 10);
    edges.record("user/c", "user/d", MAX_COUNT * 3);
    const counts = edges.takeBatches().flat().map((edge) => edge.count);
    assert.deepEqual(counts, [MAX_COUNT, MAX_COUNT]);
  });

  test("batches stay within the oracle's limit, and a batch put back is counted again", () => {
    const edges = new EdgeCounter(25_000);
    for (let i = 0; i < 25_000; i++) edges.record(`user/${i}`, `order/${i}`);
    const batches = edges.takeBatches();
    assert.deepEqual(batches.map((batch) => batch.length), [MAX_EDGES_PER_REPORT, MAX_EDGES_PER_REPORT, 5_000]);
    assert.equal(edges.size, 0);
    edges.putBack(batches[2] ?? []);
    assert.equal(edges.size, 5_000);
    edges.putBack(batches[2] ?? []);
    const [again] = edges.takeBatches();
    assert.ok(again?.every((edge) => edge.count === 2), "put back twice, counted twice");
  });

  test("a batch put back stays within the bound", () => {
    const edges = new EdgeCounter(2);
    edges.record("user/a", "user/b");
    const [batch] = edges.takeBatches();
    edges.record("user/c", "user/d");
    edges.record("user/e", "user/f");
    edges.putBack(batch ?? []);
    assert.equal(edges.size, 2);
    assert.equal(edges.dropped, 1);
  });

  test("maxPairs must be at least one", () => {
    assert.throws(() => new EdgeCounter(0), RangeError);
  });

  test("batches of long ids stay within the report size", () => {
    const edges = new EdgeCounter(20_000);
    const long = "x".repeat(200);
    for (let i = 0; i < 5_000; i++) edges.record(`${long}/${i}`, "hub");
    const batches = edges.takeBatches();
    assert.ok(batches.length > 1);
    for (const batch of batches) {
      assert.ok(Buffer.byteLength(JSON.stringify({ edges: batch })) <= MAX_REPORT_BYTES);
    }
    assert.equal(batches.reduce((n, b) => n + b.length, 0), 5_000);
  });
});
