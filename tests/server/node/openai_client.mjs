// The official `openai` npm client against `inferlab serve` (paced test
// backend, loopback, an API key). Run by run-openai-client.sh, which
// installs the client; every wait here is bounded.
//
// usage: node openai_client.mjs INFERLAB_EXE PLUGIN_DIR
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [exe, pluginDir] = process.argv.slice(2);
const KEY = 'node-test-key';

function startServer() {
  const child = spawn(exe, ['serve', '--port', '0', '--plugin-dir', pluginDir,
                            '--backend', 'paced_backend', '--api-key', KEY],
                      { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start in 20 s')), 20000);
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ child, port: Number(m[1]) });
      }
    });
    child.on('exit', (code) => reject(new Error(`server exited early (${code}): ${out}`)));
  });
}

function stopServer(child) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); resolve(-1); }, 20000);
    child.removeAllListeners('exit');
    child.on('exit', (code) => { clearTimeout(timer); resolve(code); });
    child.kill('SIGTERM');
  });
}

async function collect(stream, pick) {
  let text = '';
  const finishes = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += pick(c) ?? '';
      if (c.finish_reason) finishes.push(c.finish_reason);
    }
  }
  return { text, finishes };
}

const checks = [];
function check(name, fn) { checks.push([name, fn]); }

check('models.list and models.retrieve', async (client) => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  const id = list.data[0].id;
  assert.equal(id, 'paced-bigram');
  const one = await client.models.retrieve(id);
  assert.equal(one.id, id);
  assert.equal(one.object, 'model');
  await assert.rejects(client.models.retrieve('no-such-model'), OpenAI.NotFoundError);
});

check('completions, plain and streamed, agree', async (client) => {
  const req = { model: 'paced-bigram', prompt: 'Once', max_tokens: 12, seed: 3,
                ignore_eos: true };
  const whole = await client.completions.create(req);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices[0].text.length, 12);
  assert.equal(whole.usage.completion_tokens, 12);
  const streamed = await collect(await client.completions.create({ ...req, stream: true }),
                                 (c) => c.text);
  assert.equal(streamed.text, whole.choices[0].text);
  assert.deepEqual(streamed.finishes, ['length']);
});

check('completions logprobs', async (client) => {
  const r = await client.completions.create({ model: 'paced-bigram', prompt: 'a',
                                              max_tokens: 4, logprobs: 2, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.token_logprobs.length, 4);
  assert.ok(lp.token_logprobs.every((x) => x <= 0));
  assert.ok(Object.keys(lp.top_logprobs[0]).length >= 1);
});

check('chat, plain and streamed, with name and developer', async (client) => {
  const messages = [{ role: 'developer', content: 'Be brief.' },
                    { role: 'user', content: 'Hello', name: 'emma' }];
  const req = { model: 'paced-bigram', messages, max_tokens: 8, seed: 5, ignore_eos: true };
  const whole = await client.chat.completions.create(req);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  const streamed = await collect(await client.chat.completions.create({ ...req, stream: true }),
                                 (c) => c.delta?.content);
  assert.equal(streamed.text, whole.choices[0].message.content);
  assert.deepEqual(streamed.finishes, ['length']);
});

check('chat logprobs', async (client) => {
  const r = await client.chat.completions.create({
    model: 'paced-bigram', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3,
    logprobs: true, top_logprobs: 2, ignore_eos: true });
  const content = r.choices[0].logprobs.content;
  assert.ok(content.length >= 1);
  assert.equal(content[0].top_logprobs.length, 2);
  assert.ok(Array.isArray(content[0].bytes));
});

check('n: 2 gives two indexed choices', async (client) => {
  const r = await client.chat.completions.create({
    model: 'paced-bigram', messages: [{ role: 'user', content: 'hi' }], max_tokens: 6, n: 2,
    seed: 9, ignore_eos: true });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  const s = await client.completions.create({ model: 'paced-bigram', prompt: 'x',
                                              max_tokens: 4, n: 2, stream: true,
                                              ignore_eos: true });
  const seen = new Set();
  for await (const chunk of s) for (const c of chunk.choices) seen.add(c.index);
  assert.deepEqual([...seen].sort(), [0, 1]);
});

check('stop', async (client) => {
  const base = await client.completions.create({ model: 'paced-bigram', prompt: 'Once',
                                                 max_tokens: 16, temperature: 0,
                                                 ignore_eos: true });
  const text = base.choices[0].text;
  const stop = text.slice(3, 5);
  const r = await client.completions.create({ model: 'paced-bigram', prompt: 'Once',
                                              max_tokens: 16, temperature: 0, stop: [stop],
                                              ignore_eos: true });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
});

check('seed reproducibility', async (client) => {
  const req = { model: 'paced-bigram', prompt: 'It', max_tokens: 16, ignore_eos: true };
  const a = await client.completions.create({ ...req, seed: 11 });
  const b = await client.completions.create({ ...req, seed: 11 });
  const c = await client.completions.create({ ...req, seed: 12 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
});

check('a 400 surfaces as BadRequestError naming the field', async (client) => {
  await assert.rejects(
    client.completions.create({ model: 'paced-bigram', prompt: 'x', best_of: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
           e.error?.param === 'best_of');
});

check('a wrong key is a 401 AuthenticationError', async (_client, baseURL) => {
  const other = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0, timeout: 10000 });
  await assert.rejects(other.models.list(), OpenAI.AuthenticationError);
});

const { child, port } = await startServer();
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: KEY, maxRetries: 0, timeout: 10000 });
let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn(client, baseURL);
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}
const code = await stopServer(child);
if (code !== 0) {
  console.log(`FAIL inferlab serve exited with ${code} after SIGTERM`);
  failed++;
}
console.log(`${checks.length - failed} of ${checks.length} passed`);
process.exit(failed ? 1 : 0);
