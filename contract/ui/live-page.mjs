// The live cluster page end to end, in the machine's headless Chromium driven by playwright-core:
// opens /ui/ on a running oracle whose cluster a simulator is driving, signs in with the admin
// token as an operator would, and checks what the page shows against what the API says. Then tries
// a placement and checks the drawn explanation, and keeps a full-page screenshot.
//
//   node contract/ui/live-page.mjs BASE_URL CLUSTER SCREENSHOT.png      (ORACLE_ADMIN_TOKEN in the environment)
//
// Exits 1 with every failed check listed.
import { chromium } from "playwright-core";

const [baseUrl, cluster, screenshot] = process.argv.slice(2);
const token = process.env.ORACLE_ADMIN_TOKEN;
if (!baseUrl || !cluster || !screenshot || !token) {
  console.error("usage: ORACLE_ADMIN_TOKEN=… node live-page.mjs BASE_URL CLUSTER SCREENSHOT.png");
  process.exit(2);
}
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

const failures = [];
function check(condition, what) {
  console.log(`${condition ? "ok  " : "FAIL"} ${what}`);
  if (!condition) failures.push(what);
}

async function api(path) {
  const response = await fetch(`${baseUrl}/v1${path}`, { headers: { authorization: `Bearer ${token}` } });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

const browser = await chromium.launch({
  executablePath,
  // Chromium looks names up for itself even with background networking off (the loopback guard
  // caught its DNS queries): its resolver answers every name but loopback with "not found".
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on("pageerror", (error) => errors.push(`page error: ${error.message}`));
  // Refused requests are logged by the browser itself (the 401 before signing in, the 422 below): only
  // the script's own errors count.
  page.on("console", (message) => {
    if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) {
      errors.push(`console: ${message.text()}`);
    }
  });

  // Without a credential the page says what it needs.
  await page.goto(`${baseUrl}/ui/#cluster=${cluster}`);
  await page.waitForSelector("#problem:not([hidden])", { timeout: 10_000 });
  check((await page.textContent("#problem")).includes("credential"), "without a credential the page asks for one");

  // Signed in, it draws the cluster and keeps it fresh.
  await page.fill("#credential", token);
  await page.click("#connect button[type=submit]");
  await page.waitForSelector("body[data-loaded=true]", { timeout: 10_000 });
  await page.waitForSelector("#problem[hidden]", { state: "attached", timeout: 10_000 });
  const silos = (await api(`/clusters/${cluster}/silos?limit=1000`)).silos;
  const live = silos.filter((s) => s.status !== "dead");
  await page.waitForFunction((n) => document.querySelectorAll("#silos tbody tr.silo").length === n, silos.length, { timeout: 10_000 });
  const rows = await page.$$eval("#silos tbody tr.silo", (trs) => trs.map((tr) => ({
    silo: tr.dataset.silo,
    status: tr.dataset.status,
    bars: [...tr.querySelectorAll(".bar")].map((b) => ({ metric: b.dataset.metric, value: Number(b.dataset.value) })),
  })));
  check(rows.length === silos.length, `a row per silo (${rows.length} of ${silos.length})`);
  check(JSON.stringify(rows.map((r) => r.silo)) === JSON.stringify(silos.map((s) => s.silo)), "rows in the API's silo order");
  for (const metric of ["cpu", "memory", "activations", "directory"]) {
    const drawn = rows.filter((r) => r.bars.some((b) => b.metric === metric && b.value >= 0 && b.value <= 1));
    check(drawn.length === live.length, `every live silo has a ${metric} bar (${drawn.length})`);
  }
  // Bars are scaled to the busiest silo as the page last read them (the API, read a moment apart
  // while the simulator runs, may name another): the fullest bar is full.
  const fullest = Math.max(...rows.flatMap((r) => r.bars.filter((b) => b.metric === "activations").map((b) => b.value)));
  check(fullest === 1, `the busiest silo's activations bar is full (${fullest})`);
  check((await page.textContent("#summary-silos .value")).trim() === String(silos.length), "the summary counts the silos");
  const columns = await page.$$eval("#spread-chart g.column", (gs) => gs.map((g) => Number(g.dataset.activations)));
  check(columns.length === live.length, `a column per live silo in the spread chart (${columns.length})`);

  // Rebalancer and repartitioner, as the API reports them.
  const rebalancer = await api(`/clusters/${cluster}/rebalancer`);
  const repartitioner = await api(`/clusters/${cluster}/repartitioner`);
  await page.waitForFunction(() => document.querySelectorAll("#rounds tbody tr").length > 0, null, { timeout: 15_000 });
  check(rebalancer.reports.length > 0, `the rebalancer has cycle reports (${rebalancer.reports.length})`);
  check((await page.$$("#rebalancer-entropy circle.cycle")).length > 0, "the entropy chart draws the cycles");
  check((await page.textContent("#summary-rebalancer")).includes("session"), "the summary shows the rebalancer's session");
  check(repartitioner.rounds > 0, `the repartitioner has run rounds (${repartitioner.rounds})`);
  const drawnRounds = await page.$$eval("#rounds tbody tr", (trs) => trs.map((tr) => Number(tr.dataset.round)));
  check(drawnRounds.length > 0 && drawnRounds.every((r) => r >= 1 && r <= repartitioner.rounds + 1), `rounds listed (${drawnRounds})`);

  // A silo's grains, as the directory lists them.
  const chosen = live[0].silo;
  await page.click(`#silos tr.silo[data-silo="${chosen}"]`);
  await page.waitForSelector("#silo-grains", { timeout: 10_000 });
  const shown = await page.$$eval("#silo-grains code", (codes) => codes.map((c) => c.textContent));
  const listed = (await api(`/clusters/${cluster}/activations?silo=${encodeURIComponent(chosen)}&limit=60`)).activations.map((a) => a.grain);
  const overlap = shown.filter((g) => listed.includes(g)).length;
  check(shown.length > 0 && overlap >= Math.min(shown.length, listed.length) / 2, `the selected silo's grains (${shown.length} shown, ${overlap} still there)`);

  // The tryout: a preview, its explanation drawn.
  await page.fill("#tryout-grain", "user/tryout-from-the-page");
  await page.selectOption("#tryout-silo", live[1 % live.length].silo);
  await page.click("#tryout button[type=submit]");
  await page.waitForSelector("#tryout-verdict", { timeout: 10_000 });
  const verdict = await page.getAttribute("#tryout-verdict", "data-silo");
  check(live.some((s) => s.silo === verdict), `the tryout names a live silo (${verdict})`);
  const scored = await page.$$eval("#score-chart g.score", (gs) => gs.map((g) => ({ silo: g.dataset.silo, chosen: g.classList.contains("chosen") })));
  check(scored.length > 0 && scored.filter((s) => s.chosen).length === 1 && scored.find((s) => s.chosen).silo === verdict,
    `the score chart marks the chosen silo among ${scored.length}`);
  const lookup = await fetch(`${baseUrl}/v1/clusters/${cluster}/activations/user%2Ftryout-from-the-page`, { headers: { authorization: `Bearer ${token}` } });
  check(lookup.status === 404, "the tryout registered nothing");

  // Input mistakes come back as the problem names them.
  await page.fill("#tryout-grain", "no-type-here");
  await page.click("#tryout button[type=submit]");
  await page.waitForSelector("#tryout-problem", { timeout: 10_000 });
  check((await page.textContent("#tryout-problem")).includes("grain"), "a bad grain id is refused, naming the field");

  // Back to a good tryout for the picture, then the whole page.
  await page.fill("#tryout-grain", "user/alice");
  await page.click("#tryout button[type=submit]");
  await page.waitForSelector("#tryout-verdict", { timeout: 10_000 });
  await page.click(`#silos tr.silo[data-silo="${chosen}"]`); // fold the silo's grains away again
  await page.waitForTimeout(2_500); // one more refresh
  check(errors.length === 0, `no script errors${errors.length ? `: ${errors.join("; ")}` : ""}`);
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`screenshot: ${screenshot}`);
} finally {
  await browser.close();
}
if (failures.length) {
  console.error(`\n${failures.length} check(s) failed:\n- ${failures.join("\n- ")}`);
  process.exit(1);
}
console.log("\nthe live page shows the cluster as the API reports it");
