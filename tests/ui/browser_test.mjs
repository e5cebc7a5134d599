// The status page of `inferlab serve` and the HTML conformance report in
// headless Chromium, driven over the DevTools protocol through a pipe
// (--remote-debugging-pipe: no port, no websocket library, no npm package).
//
// usage: node browser_test.mjs CHROMIUM ARTIFACT_DIR INFERLAB CONFORMANCE
//                              PACED.so INJECT.so REFUSED.so
//
// Checks: without the key only the key prompt shows (no data); a wrong key
// is refused and the right one (typed, Enter) shows the page; the models
// and plugins tables list the served plugins and the refused one with the
// loader's reason; a manifest's HTML is shown as text (nothing runs); the
// conformance result of the report for the plugin's SHA-256 shows; a
// playground completion streams (seen growing) with logprobs on hover and
// equals the API's own answer for the same seed; Stop cancels (the server
// stops running it); the charts gain points; the page fits 400 px; the
// banner shows when the server goes and clears when it is back; the HTML
// report's matrix has a cell per plugin and test and links to messages.
// Screenshots go to ARTIFACT_DIR.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [chromium, artifacts, inferlab, conformance, pacedSo, injectSo, refusedSo] = process.argv.slice(2);
if (!refusedSo) {
  console.error("usage: browser_test.mjs CHROMIUM ARTIFACT_DIR INFERLAB CONFORMANCE PACED.so INJECT.so REFUSED.so");
  process.exit(2);
}
const KEY = "ui-test-key-" + process.pid;
const t0 = Date.now();
const work = fs.mkdtempSync(path.join(os.tmpdir(), "inferlab-ui-"));
fs.mkdirSync(artifacts, { recursive: true });
fs.rmSync(path.join(artifacts, "failure.png"), { force: true }); // a past run's
const children = [];
let failed = false;

function log(msg) { console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`); }
function check(ok, what) {
  if (!ok) throw new Error("check failed: " + what);
  log("ok: " + what);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the plugin folder, the conformance reports ------------------------------
const pluginDir = path.join(work, "plugins"), reportDir = path.join(work, "reports");
fs.mkdirSync(pluginDir, { mode: 0o755 });
fs.mkdirSync(reportDir, { mode: 0o755 });
fs.chmodSync(work, 0o755);
for (const so of [pacedSo, injectSo, refusedSo]) {
  const to = path.join(pluginDir, path.basename(so));
  fs.copyFileSync(so, to);
  fs.chmodSync(to, 0o644);
}
const plugin = (so) => path.join(pluginDir, path.basename(so));
// A few clauses keep this quick; the paced test plugin fails some of them,
// which the page must show.
const subset = ["--include", "ABI-[1-4]|TOK-[1-3]\\b|LOG-1\\b"];
function conformanceRun(args) {
  try {
    execFileSync(conformance, args, { stdio: ["ignore", "ignore", "pipe"], timeout: 60000 });
  } catch (e) {
    if (e.status !== 1) throw e; // 1: some test failed, as expected
  }
}
conformanceRun([plugin(pacedSo), ...subset, "--format", "json", "--output", path.join(reportDir, "paced.json")]);
const reportHtml = path.join(artifacts, "conformance-report.html");
conformanceRun([plugin(pacedSo), plugin(injectSo), plugin(refusedSo), ...subset, "--format", "html", "--output", reportHtml]);
log("conformance reports written");

// ---- inferlab serve ----------------------------------------------------------
function startServe(port) {
  return new Promise((resolve, reject) => {
    // Two named backends: the built-in plugins folder (the build's) is
    // listed on the page as well, but only these two serve.
    const p = spawn(inferlab, ["serve", "--port", String(port), "--plugin-dir", pluginDir,
                               "--backend", "paced_backend", "--backend", "ui_inject",
                               "--api-key", KEY, "--conformance-reports", reportDir,
                               "--set", "paced_backend.step_ms=25"],
                    { stdio: ["ignore", "pipe", "pipe"] });
    children.push(p);
    let out = "", err = "";
    p.stderr.on("data", (d) => { err += d; });
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve({ proc: p, port: Number(m[1]) });
    });
    p.on("exit", (code) => reject(new Error(`serve exited ${code}: ${err}`)));
    setTimeout(() => reject(new Error("serve did not start: " + err)), 20000);
  });
}
let serve = await startServe(0);
const base = `http://127.0.0.1:${serve.port}`;
log("serving on " + base);

// ---- Chromium over the DevTools pipe -----------------------------------------
const browser = spawn(chromium, [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
  "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
  "--disable-extensions", "--disable-background-networking", "--disable-sync",
  "--mute-audio", "--hide-scrollbars", `--user-data-dir=${path.join(work, "profile")}`,
  "--window-size=1280,900", "about:blank",
], { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
children.push(browser);
let browserErr = "";
browser.stderr.on("data", (d) => { browserErr += d; });

const pending = new Map();
let nextId = 0, inbox = Buffer.alloc(0);
browser.stdio[4].on("data", (chunk) => {
  inbox = Buffer.concat([inbox, chunk]);
  for (let z; (z = inbox.indexOf(0)) >= 0;) {
    const msg = JSON.parse(inbox.subarray(0, z).toString("utf8"));
    inbox = inbox.subarray(z + 1);
    const w = msg.id !== undefined && pending.get(msg.id);
    if (!w) continue;
    pending.delete(msg.id);
    if (msg.error) w.reject(new Error(`${w.method}: ${msg.error.message}`));
    else w.resolve(msg.result);
  }
});
function send(method, params = {}, sessionId) {
  const id = ++nextId;
  const msg = { id, method, params };
  if (sessionId) msg.sessionId = sessionId;
  browser.stdio[3].write(JSON.stringify(msg) + "\0");
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, method });
    setTimeout(() => { if (pending.delete(id)) reject(new Error(method + ": no answer")); }, 15000);
  });
}
const { targetId } = await send("Target.createTarget", { url: "about:blank" });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
const cmd = (m, p) => send(m, p, sessionId);
await cmd("Page.enable");
await cmd("Runtime.enable");
log("chromium up");

async function evaluate(expression) {
  const r = await cmd("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true });
  if (r.exceptionDetails) throw new Error("page: " + (r.exceptionDetails.exception?.description || r.exceptionDetails.text));
  return r.result.value;
}
async function waitFor(expression, what, ms = 8000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await evaluate(expression);
    if (last) return last;
    await sleep(80);
  }
  throw new Error(`timed out waiting for ${what} (${expression} = ${JSON.stringify(last)})`);
}
async function navigate(url) {
  await cmd("Page.navigate", { url });
  await waitFor("document.readyState === 'complete'", "the page to load");
}
async function screenshot(name) {
  const { data } = await cmd("Page.captureScreenshot", { format: "png", captureBeyondViewport: true });
  fs.writeFileSync(path.join(artifacts, name), Buffer.from(data, "base64"));
  log("screenshot " + name);
}
async function typeInto(selector, text) {
  await evaluate(`document.querySelector(${JSON.stringify(selector)}).focus()`);
  await cmd("Input.insertText", { text });
}
async function pressEnter() {
  for (const type of ["keyDown", "keyUp"])
    await cmd("Input.dispatchKeyEvent", { type, key: "Enter", code: "Enter", windowsVirtualKeyCode: 13, text: type === "keyDown" ? "\r" : undefined });
}
async function api(p, body) {
  const r = await fetch(base + p, { method: body ? "POST" : "GET", headers: { "Authorization": "Bearer " + KEY, "Content-Type": "application/json" }, body: body && JSON.stringify(body) });
  if (!r.ok) throw new Error(`${p}: ${r.status} ${await r.text()}`);
  return p === "/metrics" ? r.text() : r.json();
}

async function main() {
  // -- the key flow: nothing but the prompt without it ---------------------
  await navigate(base + "/");
  await waitFor("!document.getElementById('auth').hidden", "the key prompt");
  check(await evaluate("document.getElementById('main').hidden"), "without the key the page is hidden");
  check(!(await evaluate("document.body.innerText.includes('paced')")), "without the key no plugin data is in the page");
  await screenshot("status-key-prompt.png");
  await typeInto("#auth-key", "wrong-key");
  await pressEnter();
  await waitFor("document.getElementById('auth-msg').textContent.includes('refused')", "the wrong key to be refused");
  check(await evaluate("document.getElementById('main').hidden"), "a wrong key shows nothing");
  await evaluate("document.getElementById('auth-key').value = ''");
  await typeInto("#auth-key", KEY);
  await pressEnter();
  await waitFor("!document.getElementById('main').hidden", "the page after the right key");

  // -- models and plugins ----------------------------------------------------
  await waitFor("document.querySelectorAll('#plugins > tbody > tr').length >= 3", "the plugin rows");
  const rows = await evaluate(`Array.from(document.querySelectorAll('#plugins > tbody > tr')).map((r) => ({
      name: r.querySelector('.name').textContent, state: r.cells[1].querySelector('.badge').textContent,
      reason: (r.querySelector('.reason') || {}).textContent || '', conf: r.querySelector('.conf').textContent,
      desc: (r.querySelector('.desc') || {}).textContent || '', sha: r.cells[5].title }))`);
  const byName = (n) => rows.find((r) => r.name === n);
  check(byName("paced_backend")?.state === "available", "paced_backend is listed available");
  check(byName("ui_inject")?.state === "available", "ui_inject is listed available");
  const refused = rows.find((r) => r.state === "rejected");
  check(refused && refused.reason.includes("manifest version '3.0.1' differs from the entry's version '3.0.0'"),
        "the refused plugin is listed with the loader's reason");
  const backends = await evaluate(`Array.from(document.querySelectorAll('#backends > tbody > tr')).map((r) => [r.dataset.backend, r.cells[1].textContent])`);
  check(backends.some(([b, s]) => b === "paced_backend" && s === "serving") &&
        backends.some(([b, s]) => b === "ui_inject" && s === "serving"), "both backends are serving");
  check(/^(fail|crash)/.test(byName("paced_backend").conf) && byName("paced_backend").conf.includes("pass"),
        "paced_backend's conformance result comes from the report for its SHA-256");
  check(byName("ui_inject").conf.includes("no report"), "ui_inject has no report");
  // -- untrusted text --------------------------------------------------------
  check(byName("ui_inject").desc.includes('<script>window.__pwned=2</script>') &&
        byName("ui_inject").desc.includes('<img src=x'), "the manifest's markup is shown as text");
  await evaluate("document.querySelector('[data-plugin=ui_inject] details').open = true");
  await sleep(200);
  check(await evaluate("window.__pwned === undefined && !document.getElementById('injected') && !document.querySelector('#plugins img, #plugins script')"),
        "nothing of the manifest's markup became an element or ran");

  // -- playground: streams, logprobs, equals the API --------------------------
  // The charts plot changes between samples: let them take a first one.
  await waitFor("Number(document.getElementById('c-queue').dataset.points) >= 1", "the charts' first sample");
  const params = { model: "paced-bigram", prompt: "Elizabeth", max_tokens: 24, temperature: 0.9, top_p: 0.95, seed: 1234 };
  await evaluate(`(() => { const s = (id, v) => { document.getElementById(id).value = v; };
      s('pg-model', 'paced-bigram'); s('pg-mode', 'completion'); s('pg-prompt', ${JSON.stringify(params.prompt)});
      s('pg-temp', '${params.temperature}'); s('pg-top-p', '${params.top_p}'); s('pg-max', '${params.max_tokens}');
      s('pg-seed', '${params.seed}'); })()`);
  // Each change of the output is recorded with its time: a streamed answer
  // grows in many steps over the generation, a whole one appears at once.
  await evaluate(`window.__growth = []; new MutationObserver(() => window.__growth.push([performance.now(),
      document.querySelectorAll('#pg-out span.tok').length])).observe(document.getElementById('pg-out'), {childList: true});
      document.getElementById('pg-run').click()`);
  await waitFor("document.getElementById('pg-out').dataset.state === 'done'", "the completion to end", 15000);
  const shown = await evaluate("document.getElementById('pg-out').textContent");
  const spans = await evaluate("document.querySelectorAll('#pg-out span.tok').length");
  const growth = (await evaluate("window.__growth")).filter(([, n]) => n > 0);
  const steps = new Set(growth.map(([, n]) => n)).size, spread = growth.length ? growth[growth.length - 1][0] - growth[0][0] : 0;
  check(steps >= 4 && spread > 100, `the completion streamed (${spans} chunks shown in ${steps} steps over ${spread.toFixed(0)} ms)`);
  const answer = await api("/v1/completions", params);
  check(shown === answer.choices[0].text, `the playground's text equals the API's for seed ${params.seed}: ${JSON.stringify(shown)}`);
  check(await evaluate("document.querySelectorAll('#pg-out span.tok[data-logprob]').length") > 0, "tokens carry logprobs");
  const box = await evaluate("(() => { const t = document.querySelector('#pg-out span.tok'); t.scrollIntoView({block: 'center'}); const r = t.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()");
  await cmd("Input.dispatchMouseEvent", { type: "mouseMoved", x: box[0], y: box[1] });
  await waitFor("getComputedStyle(document.getElementById('pg-tip')).display === 'block' && document.getElementById('pg-tip').textContent.includes('logprob')", "the logprob tooltip on hover");
  log("ok: hovering a token shows its logprob");

  // -- charts ----------------------------------------------------------------
  await waitFor("Number(document.getElementById('c-tps').dataset.points) >= 2 && Number(document.getElementById('c-tps').dataset.max) > 0",
                "the tokens/s chart to show the completion");
  await waitFor("Number(document.getElementById('c-ttft').dataset.max) > 0", "the TTFT chart to show a value");
  const before = await evaluate("Number(document.getElementById('c-queue').dataset.points)");
  await sleep(1700);
  check(await evaluate("Number(document.getElementById('c-queue').dataset.points)") > before, "the charts keep updating");

  // -- Stop cancels ----------------------------------------------------------
  await evaluate("document.getElementById('pg-max').value = '2000'; document.getElementById('pg-run').click()");
  await waitFor("document.querySelectorAll('#pg-out span.tok').length >= 3", "a long completion to start");
  const running = (m) => Number((m.match(/^inferlab:num_requests_running (\S+)$/m) || [])[1]);
  check(running(await api("/metrics")) === 1, "the server runs the long completion");
  await evaluate("document.getElementById('pg-stop').click()");
  await waitFor("document.getElementById('pg-out').dataset.state === 'stopped'", "the page to stop");
  let gone = false;
  for (let i = 0; i < 40 && !gone; i++) { gone = running(await api("/metrics")) === 0; if (!gone) await sleep(50); }
  check(gone, "Stop cancelled the request on the server");
  await screenshot("status-page.png");

  // -- narrow screen ---------------------------------------------------------
  await cmd("Emulation.setDeviceMetricsOverride", { width: 400, height: 800, deviceScaleFactor: 1, mobile: true });
  await sleep(300);
  check(await evaluate("document.documentElement.scrollWidth <= 400"), "the page fits 400 px without scrolling sideways");
  await screenshot("status-page-400px.png");
  await cmd("Emulation.clearDeviceMetricsOverride");

  // -- the server goes away and comes back -----------------------------------
  const port = serve.port;
  serve.proc.removeAllListeners("exit");
  serve.proc.kill("SIGTERM");
  await new Promise((r) => serve.proc.once("exit", r));
  await waitFor("document.getElementById('banner').classList.contains('on')", "the banner when the server is gone");
  check(await evaluate("document.getElementById('banner').textContent.includes('cannot be reached')"), "the banner says the server cannot be reached");
  serve = await startServe(port);
  await waitFor("!document.getElementById('banner').classList.contains('on')", "the banner to clear", 10000);
  log("ok: the page reconnected by itself");

  // -- the HTML conformance report -------------------------------------------
  await navigate("file://" + reportHtml);
  const rep = await evaluate(`(() => { const m = document.getElementById('matrix');
      return { cells: m.querySelectorAll('td.cell a.r').length, plugins: document.querySelectorAll('#plugins tr[data-plugin]').length,
               fails: m.querySelectorAll('a.r.fail, a.r.crash').length, passes: m.querySelectorAll('a.r.pass').length,
               summary: document.getElementById('summary').textContent,
               sha: document.querySelector('#plugins tr[data-plugin] td.mono').textContent }; })()`);
  const tests = Number(rep.summary.match(/(\d+) test\(s\)/)[1]);
  check(rep.plugins === 3 && rep.cells === 3 * tests, `the matrix has a cell per plugin and test (${rep.cells})`);
  check(rep.fails > 0 && rep.passes > 0, "the matrix shows passes and failures");
  check(/^FAIL: 3 plugin\(s\)/.test(rep.summary), "the summary line: " + rep.summary);
  check(rep.sha === byName("paced_backend").sha, "the report names the plugin's SHA-256");
  await evaluate("document.querySelector('#matrix a.r.fail, #matrix a.r.crash').click()");
  await waitFor("location.hash.startsWith('#m-') && document.querySelector(location.hash + ' pre').textContent.length > 0", "a failing cell to lead to its message");
  log("ok: a failing cell leads to its message");
  await evaluate("window.scrollTo(0, 0)");
  await screenshot("conformance-report.png");
}

try {
  await main();
  log(`PASSED in ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${artifacts}`);
} catch (e) {
  failed = true;
  console.error("FAILED: " + (e.stack || e));
  try { await screenshot("failure.png"); } catch (e2) { /* the browser may be gone */ }
  if (browserErr) console.error("chromium stderr (tail):\n" + browserErr.slice(-2000));
} finally {
  const exits = children.filter((c) => c.exitCode === null && c.signalCode === null)
                       .map((c) => new Promise((r) => { c.once("exit", r); c.kill("SIGKILL"); }));
  await Promise.race([Promise.all(exits), sleep(5000)]);
  try { fs.rmSync(work, { recursive: true, force: true, maxRetries: 5 }); } catch (e) { /* a temp folder */ }
}
process.exit(failed ? 1 : 0);
