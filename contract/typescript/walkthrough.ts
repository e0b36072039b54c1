// The README's walk-through, through openapi-fetch typed by openapi-typescript from the unmodified openapi/openapi.json.
//
// Usage: ORACLE_ADMIN_TOKEN=… node build/js/walkthrough.js BASE_URL   (run by contract/clients.sh, which generates
// and compiles first). With the admin token it issues itself a key of its cluster and makes every other call with it.
// Every call is checked by tsc against the generated paths; every check reads the typed result. Types vanish at run
// time, so `present` also checks that each answer carries every field its schema requires.
import { randomBytes } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, paths } from "./build/oracle.js";

type S = components["schemas"];
type Problem = S["Problem"];

function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

/** The typed body of a successful answer; on anything else, fail showing what the oracle sent. */
function ok<T>(r: { data?: T; error?: unknown; response: Response }, status = 200): T {
  assert(r.response.status === status && r.data !== undefined,
    `${r.response.url}: expected ${status}, got ${r.response.status}: ${JSON.stringify(r.error)}`);
  return r.data;
}

/** The typed problem of a refused request. */
function bad(r: { data?: unknown; error?: Problem; response: Response }, status: number): Problem {
  assert(r.response.status === status && r.error !== undefined,
    `${r.response.url}: expected ${status}, got ${r.response.status}: ${JSON.stringify(r.data)}`);
  assert(r.response.headers.get("content-type") === "application/problem+json", "problem+json");
  return present(r.error, { type: true, title: true, status: true, detail: true, errors: true });
}

/** Checks at run time that `value` has every key its type declares (the compiler checks the list is complete). */
function present<T extends object>(value: T, keys: { [K in keyof Required<T>]: true }): T {
  for (const key of Object.keys(keys)) assert(key in value, `missing field ${key} in ${JSON.stringify(value)}`);
  return value;
}

const silo = (s: S["SiloResponse"]) => present(s, { silo: true, address: true, status: true, role: true,
  metadata: true, grain_types: true, load: true, smoothed: true, last_heartbeat_age_ms: true,
  last_heartbeat_at_ms: true, first_seen_at_ms: true, heartbeat_count: true, silo_ttl_ms: true, drain: true });
const placement = (p: S["PlacementResponse"]) => present(p, { grain: true, silo: true, address: true,
  outcome: true, strategy: true, epoch: true, max_local: true, explanation: true });

async function main(baseUrl: string): Promise<void> {
  const cluster = `walk-ts-${randomBytes(4).toString("hex")}`;
  const path = { cluster };
  const silos = ["10.0.0.5:11111@1", "10.0.0.6:11111@1", "10.0.0.7:11111@1"] as const;
  console.log(`cluster ${cluster}`);

  // 0. The admin issues a key of the cluster, with both scopes; every later call uses it. A request without a
  //    credential is refused (401), and the key cannot issue keys itself (403).
  const token = process.env["ORACLE_ADMIN_TOKEN"];
  assert(token !== undefined && token !== "", "ORACLE_ADMIN_TOKEN is set");
  const admin = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
  const key = ok(await admin.POST("/v1/clusters/{cluster}/keys",
    { params: { path }, body: { scopes: ["silo", "operator"], label: "typescript walk-through" } }), 201);
  assert(key.key.startsWith(key.starts_with) && key.cluster === cluster, "the key is the cluster's");
  const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${key.key}` } });
  bad(await createClient<paths>({ baseUrl }).GET("/v1/clusters/{cluster}/silos", { params: { path } }), 401);
  bad(await client.POST("/v1/clusters/{cluster}/keys", { params: { path }, body: { scopes: ["silo"] } }), 403);
  console.log(`0. key ${key.id} issued with scopes ${key.scopes.join()}`);

  // a. Three silos report their load; the third reports only its CPU. The first two have role "storage".
  for (const [i, id] of silos.entries()) {
    const beat: S["HeartbeatRequest"] = i < 2
      ? { silo: id, cpu_usage: 20 * (i + 1), memory_usage_bytes: 4_000_000_000,
          max_available_memory_bytes: 16_000_000_000, activation_count: 100 * (i + 1),
          connection_count: 10 * (i + 1), role: "storage" }
      : { silo: id, cpu_usage: 20 * (i + 1) };
    const answer = ok(await client.POST("/v1/clusters/{cluster}/heartbeats", { params: { path }, body: beat }));
    const seen = silo(answer);
    assert(seen.silo === id && seen.status === "active" && seen.load.cpu_usage === 20 * (i + 1), "heartbeat");
    assert(answer.lease_ms === seen.silo_ttl_ms - seen.silo_ttl_ms / 10, "the lease: the TTL less a tenth");
    assert(seen.load.memory_usage_bytes === (i < 2 ? 4_000_000_000 : null), "memory");
  }
  console.log("a. 3 heartbeats: all active");

  // b. Membership: the list (paged in id order), then one silo ('@' and ':' in the path).
  const listed = ok(await client.GET("/v1/clusters/{cluster}/silos", { params: { path, query: { limit: 100 } } }));
  assert(listed.silos.map(silo).map((s) => s.silo).join() === silos.join(), "listed in id order");
  assert(listed.next_cursor === null && listed.cluster === cluster, "one page");
  const one = silo(ok(await client.GET("/v1/clusters/{cluster}/silos/{silo}",
    { params: { path: { cluster, silo: silos[0] } } })));
  assert(one.silo === silos[0] && one.address === "10.0.0.5:11111" && one.role === "storage", "one silo");
  console.log(`b. listed ${listed.silos.length} silos; ${one.silo} has smoothed cpu ${one.smoothed.cpu_usage}`);

  // c. Place user/alice with an explanation, then again: the same activation comes back.
  const placements = "/v1/clusters/{cluster}/placements";
  const placed = placement(ok(await client.POST(placements,
    { params: { path }, body: { grain: "user/alice", explain: true } })));
  const why = placed.explanation;
  assert(placed.outcome === "placed" && typeof placed.epoch === "number" && why !== null, "placed, explained");
  present(why, { strategy: true, candidates: true, excluded: true, filters: true, scores: true, rule: true, hint: true });
  assert([...why.candidates].sort().join() === silos.join(), "every silo is a candidate");
  const again = placement(ok(await client.POST(placements, { params: { path }, body: { grain: "user/alice" } })));
  assert(again.outcome === "existing" && again.silo === placed.silo && again.epoch === placed.epoch, "existing");
  console.log(`c. user/alice placed on ${placed.silo}, epoch ${placed.epoch}, rule ${why.rule}; then existing`);

  // d. Directory lookup. openapi-fetch percent-encodes the grain's '/' (user%2Falice); the oracle takes it.
  const activation = "/v1/clusters/{cluster}/activations/{grain}";
  const lookup = await client.GET(activation, { params: { path: { cluster, grain: "user/alice" } } });
  assert(lookup.response.url.endsWith("/activations/user%2Falice"), lookup.response.url);
  const found = present(ok(lookup), { grain: true, silo: true, address: true, strategy: true, epoch: true,
    created_at_ms: true });
  assert(found.grain === "user/alice" && found.silo === placed.silo && found.epoch === placed.epoch, "lookup");
  console.log(`d. lookup of user/alice: ${found.silo}, epoch ${found.epoch}`);

  // e. Three grains in one batch call: three results, each a placement.
  const grains = ["order/1", "order/2", "order/3"];
  const batch = ok(await client.POST("/v1/clusters/{cluster}/placements/batch",
    { params: { path }, body: { placements: grains.map((grain) => ({ grain })) } }));
  assert(batch.results.map((r) => r.grain).join() === grains.join(), "3 results in order");
  const batchSilos = batch.results.map((r) => {
    assert(r.error === null && r.placement !== null && placement(r.placement).outcome === "placed", r.grain);
    return r.placement.silo;
  });
  console.log(`e. batch: ${batchSilos.join(", ")}`);

  // f. Policy: read it with its ETag, replace it with If-Match, then a stale If-Match is refused (412).
  const policy = "/v1/clusters/{cluster}/policy";
  const read = await client.GET(policy, { params: { path } });
  const etag = read.response.headers.get("ETag");
  assert(etag !== null && ok(read).policy.default_strategy === "resource_optimized", "policy with ETag");
  const input: S["PolicyInput"] = {
    default_strategy: "activation_count",
    grain_types: { session: { strategy: "prefer_local", filters: [{ kind: "required_match", keys: ["zone"] },
      { kind: "preferred_match", keys: ["rack"], min_candidates: 2, order: 1 }] } },
  };
  const written = await client.PUT(policy, { params: { path, header: { "If-Match": etag } }, body: input });
  const changed = ok(written);
  const newEtag = written.response.headers.get("ETag");
  assert(newEtag !== etag && newEtag === `"${changed.version}"`, "a new ETag");
  assert(changed.policy.default_strategy === "activation_count", "default strategy");
  const session = changed.policy.grain_types["session"];
  const [required, preferred] = session?.filters ?? [];
  assert(session?.strategy === "prefer_local" && required?.kind === "required_match", "session type");
  assert(preferred?.kind === "preferred_match" && preferred.keys.join() === "rack" && preferred.min_candidates === 2,
    "preferred_match filter");
  const stale = bad(await client.PUT(policy, { params: { path, header: { "If-Match": etag } }, body: input }), 412);
  console.log(`f. policy ${etag} -> ${newEtag}; stale If-Match: ${stale.status} ${stale.type}`);

  // g. A connection pool of the "storage" silos, read back whole, then asked for a node with an explanation.
  const poolPath = { params: { path: { cluster, pool: "storage" } } };
  const poolIn: S["PoolInput"] = { members: { role: "storage" }, rule: "connection_count", ttl_seconds: 5 };
  ok(await client.PUT("/v1/clusters/{cluster}/pools/{pool}", { ...poolPath, body: poolIn }));
  const pool = present(ok(await client.GET("/v1/clusters/{cluster}/pools/{pool}", poolPath)),
    { members: true, rule: true, burst_aware: true, ttl_seconds: true });
  present(pool.members, { role: true, silos: true, metadata: true });
  assert(pool.rule === "connection_count" && pool.ttl_seconds === 5 && !pool.burst_aware, "pool read back");
  assert(pool.members.role === "storage" && pool.members.silos === null && pool.members.metadata === null, "members");
  const node = present(ok(await client.POST("/v1/clusters/{cluster}/pools/{pool}/connections",
    { params: { ...poolPath.params, query: { explain: true } } })),
    { silo: true, address: true, rule: true, valid_for_ms: true, explanation: true });
  assert(node.silo !== silos[2] && silos.some((s) => s === node.silo) && node.explanation !== null, "a storage node");
  assert([...node.explanation.candidates].sort().join() === silos.slice(0, 2).join(), "storage candidates");
  console.log(`g. pool storage -> ${node.silo} (${node.address}), figures ${JSON.stringify(node.explanation.figures)}`);

  // h. The silo deactivates user/alice, naming the activation (silo and epoch); the lookup then finds nothing.
  assert(placed.epoch !== null, "an epoch");
  const gone = await client.DELETE(activation, { params: { path: { cluster, grain: "user/alice" },
    query: { silo: placed.silo, epoch: placed.epoch } } });
  assert(gone.response.status === 204, `deactivation: ${gone.response.status} ${JSON.stringify(gone.error)}`);
  const missing = bad(await client.GET(activation, { params: { path: { cluster, grain: "user/alice" } } }), 404);
  console.log(`h. deactivated; lookup: ${missing.status} ${missing.type}`);

  // i. A CPU of 140 % is refused with a problem naming the field.
  const refused = bad(await client.POST("/v1/clusters/{cluster}/heartbeats",
    { params: { path }, body: { silo: "10.0.0.9:11111@1", cpu_usage: 140 } }), 422);
  const field = refused.errors[0];
  assert(field !== undefined && field.field === "cpu_usage", JSON.stringify(refused));
  console.log(`i. cpu_usage 140: ${refused.status} ${field.field}: ${field.message}`);

  // j. A planned restart: the third silo (given five carts by hint) is drained, hands them over, has none left.
  const carts = [0, 1, 2, 3, 4].map((i) => ({ grain: `cart/${i}`, hint: silos[2] }));
  const hinted = ok(await client.POST("/v1/clusters/{cluster}/placements/batch",
    { params: { path }, body: { placements: carts } }));
  assert(hinted.results.every((r) => r.placement?.silo === silos[2]), "carts on the third silo");
  const siloPath = { params: { path: { cluster, silo: silos[2] } } };
  const drained = present(ok(await client.POST("/v1/clusters/{cluster}/silos/{silo}/drain", siloPath)),
    { silo: true, planner: true, issued: true, stuck: true });
  assert(silo(drained.silo).status === "shutting_down" && drained.silo.drain !== null, "drained");
  // The answer counts what this request issued; the lease holder's mover may have issued them a moment before it.
  const issued = drained.issued.reduce((n, t) => n + t.migrations, 0);
  assert((issued === 0 || issued === 5) && drained.issued.every((t) => silos.slice(0, 2).some((s) => s === t.silo)),
    "issued to the other silos");
  const open = ok(await client.GET("/v1/clusters/{cluster}/migrations",
    { params: { path, query: { silo: silos[2], limit: 1000 } } }));
  assert(open.migrations.length === 5 && open.next_cursor === null, "the five migrations are open");
  for (const m of open.migrations) {
    const moved = ok(await client.POST("/v1/clusters/{cluster}/migrations/{id}/complete",
      { params: { path: { cluster, id: m.id } } }));
    assert(moved.migration.id === m.id && moved.epoch > m.epoch && m.reason === "drain", "moved");
  }
  const after = silo(ok(await client.GET("/v1/clusters/{cluster}/silos/{silo}", siloPath)));
  assert(after.drain?.remaining_activations === 0 && after.drain.migrating === 0, JSON.stringify(after.drain));
  console.log(`j. drained ${silos[2]} (planner ${drained.planner}): ${open.migrations.length} grains moved, none left`);
  console.log("typescript walk-through: OK");
}

const baseUrl = process.argv[2];
if (process.argv.length !== 3 || baseUrl === undefined) {
  console.error("usage: node walkthrough.js BASE_URL");
  process.exit(2);
}
main(baseUrl).catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
