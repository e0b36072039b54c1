import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Backoff, MAX_RETRY_AFTER_S, parseRetryAfter, seededRandom } from "../../src/index.js";

describe("Backoff", () => {
  test("Retry-After wins, and otherwise delays grow with jitter within the cap", () => {
    const backoff = new Backoff({ baseMs: 100, capMs: 1_000, rng: seededRandom(7) });
    assert.equal(backoff.nextDelay(3), 3_000, "the oracle's seconds, as ms");
    const delays = Array.from({ length: 8 }, () => backoff.nextDelay());
    delays.forEach((delay, i) => {
      const attempt = i + 2;
      const ceiling = Math.min(1_000, 100 * 2 ** (attempt - 1));
      assert.ok(delay >= ceiling / 2 && delay <= ceiling, `attempt ${attempt}: ${delay} in [${ceiling / 2}, ${ceiling}]`);
    });
    assert.ok(delays.slice(3).every((delay) => delay <= 1_000), "the cap holds");

    const again = new Backoff({ baseMs: 100, capMs: 1_000, rng: seededRandom(7) });
    again.nextDelay(3);
    assert.deepEqual(Array.from({ length: 8 }, () => again.nextDelay()), delays, "one seed, one sequence");

    const other = new Backoff({ baseMs: 100, capMs: 1_000, rng: seededRandom(8) });
    other.nextDelay(3);
    assert.notDeepEqual(Array.from({ length: 8 }, () => other.nextDelay()), delays, "another seed, another");

    backoff.reset();
    assert.ok(backoff.nextDelay() <= 100, "after a reset it starts from the base again");
  });

  test("a Retry-After is held to thirty times the cap and never negative", () => {
    const backoff = new Backoff({ capMs: 1_000 });
    assert.equal(backoff.nextDelay(3_600), 30_000);
    assert.equal(backoff.nextDelay(0), 0);
    const lowest = new Backoff({ baseMs: 100, rng: () => 0 });
    assert.equal(lowest.nextDelay(null), 50, "null is no Retry-After: half the first ceiling at the lowest draw");
  });

  test("the jitter spans its whole range across draws", () => {
    const backoff = new Backoff({ baseMs: 1_000, capMs: 1_000, rng: seededRandom(1) });
    const delays = Array.from({ length: 1_000 }, () => backoff.nextDelay());
    assert.ok(Math.min(...delays) < 520 && Math.max(...delays) > 980, "draws reach both ends");
    assert.ok(delays.every((delay) => delay >= 500 && delay <= 1_000));
  });

  test("Retry-After headers are read as seconds", () => {
    assert.equal(parseRetryAfter("1"), 1);
    assert.equal(parseRetryAfter("0.5"), 0.5);
    assert.equal(parseRetryAfter(null), null);
    assert.equal(parseRetryAfter(""), null);
    assert.equal(parseRetryAfter("soon"), null);
    assert.equal(parseRetryAfter("-3"), null);
  });

  test("absurd Retry-After values are ignored or bounded, never thrown on", () => {
    for (const absurd of ["NaN", "Infinity", "-Infinity", "1e400", "-0.5", "  "]) {
      assert.equal(parseRetryAfter(absurd), null, absurd);
    }
    assert.equal(parseRetryAfter("99999999999"), MAX_RETRY_AFTER_S);
    const backoff = new Backoff({ baseMs: 100, capMs: 1_000, rng: () => 0 });
    assert.equal(backoff.nextDelay(Number.NaN), 50, "NaN is no Retry-After: it would put the next attempt off forever");
    assert.equal(backoff.nextDelay(Number.POSITIVE_INFINITY), 30_000, "held to thirty times the cap");
  });
});
