import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Lease } from "../../src/index.js";

describe("Lease", () => {
  test("a lease counts from when the heartbeat was sent", () => {
    const lease = new Lease();
    assert.equal(lease.holds(0), false, "never granted");
    assert.equal(lease.grant(10_000, 9_000, 10_500), true);
    assert.equal(lease.holds(18_999), true);
    assert.equal(lease.holds(19_000), false, "it ends at sent + lease_ms, not at the answer + lease_ms");
    assert.equal(lease.remaining(15_000), 4_000);
    assert.equal(lease.remaining(20_000), 0);
  });

  test("a later acknowledgement never shortens it", () => {
    const lease = new Lease();
    lease.grant(10_000, 9_000, 10_100);
    assert.equal(lease.grant(9_000, 9_000, 10_200), false, "an older heartbeat answered late");
    assert.equal(lease.until, 19_000);
    assert.equal(lease.grant(11_000, 5_000, 11_100), false, "a shorter lease (the TTL was lowered)");
    assert.equal(lease.until, 19_000);
    assert.equal(lease.grant(11_000, 9_000, 11_100), true);
    assert.equal(lease.until, 20_000);
  });

  test("an acknowledgement after its lease ran out grants nothing", () => {
    const lease = new Lease();
    assert.equal(lease.grant(0, 1_000, 1_500), false);
    assert.equal(lease.grant(0, 1_000, 1_000), false, "exactly at the end is too late too");
    assert.equal(lease.holds(1_500), false);
    assert.equal(lease.until, 0);
  });
});
