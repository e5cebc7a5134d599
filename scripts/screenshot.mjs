// A screenshot of a page in headless Chromium (the README's pictures of the
// status page and the HTML conformance report). Not a test; not built.
//
// usage: node scripts/screenshot.mjs CHROMIUM URL OUT.png [KEY] [WIDTH] [HEIGHT] [SCRIPT]
//
// KEY ("" for none) is typed into the status page's key prompt; SCRIPT is
// JavaScript run in the page before the picture (e.g. to start a
// completion); the picture is taken 5 s after the page loads, so the
// charts have samples.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [chromium, url, out, key = "", width = "1280", height = "900", script = ""] = process.argv.slice(2);
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "inferlab-shot-"));
const b = spawn(chromium, ["--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
  "--no-first-run", "--hide-scrollbars", `--user-data-dir=${profile}`, "about:blank"],
  { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
const pending = new Map();
let id = 0, inbox = Buffer.alloc(0);
b.stdio[4].on("data", (c) => {
  inbox = Buffer.concat([inbox, c]);
  for (let z; (z = inbox.indexOf(0)) >= 0;) {
    const m = JSON.parse(inbox.subarray(0, z).toString());
    inbox = inbox.subarray(z + 1);
    const w = pending.get(m.id);
    if (w) { pending.delete(m.id); m.error ? w[1](new Error(m.error.message)) : w[0](m.result); }
  }
});
const send = (method, params = {}, sessionId) => new Promise((res, rej) => {
  pending.set(++id, [res, rej]);
  b.stdio[3].write(JSON.stringify({ id, method, params, sessionId }) + "\0");
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const { targetId } = await send("Target.createTarget", { url: "about:blank" });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
const cmd = (m, p) => send(m, p, sessionId);
const run = (expression) => cmd("Runtime.evaluate", { expression, awaitPromise: true });
await cmd("Emulation.setDeviceMetricsOverride", { width: Number(width), height: Number(height), deviceScaleFactor: 1, mobile: false });
await cmd("Page.navigate", { url });
await sleep(1000);
if (key) {
  await run(`document.getElementById('auth-key').value = ${JSON.stringify(key)}; document.getElementById('auth-go').click()`);
  await sleep(1000);
}
if (script) await run(script);
await sleep(5000);
const { data } = await cmd("Page.captureScreenshot", { format: "png" });
fs.writeFileSync(out, Buffer.from(data, "base64"));
b.kill("SIGKILL");
await sleep(300);
fs.rmSync(profile, { recursive: true, force: true, maxRetries: 5 });
