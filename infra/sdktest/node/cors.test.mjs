// The official OpenAI Node SDK, as a web page on an allowed origin would
// run it: before each request the SDK makes, this does the CORS preflight
// a browser sends (OPTIONS with the method and every header the SDK set
// that is not CORS-safelisted, the SDK's x-stainless-* included), checks
// the answer allows the origin, the method and each header, then sends the
// request with its Origin and checks the answer may be read.
//
// Run by infra/devnet TestCORSFromTheOfficialSDK, which passes:
//
//   OPENAI_BASE_URL   the gateway's …/v1, whose API allows C0MPUTE_ORIGIN
//   OPENAI_API_KEY    a key with credits
//   C0MPUTE_MODEL     a model a worker serves
//   C0MPUTE_ORIGIN    the page's origin
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set; run this through go test ./infra/devnet -run TestCORSFromTheOfficialSDK`);
  return v;
}

const origin = env('C0MPUTE_ORIGIN');
const model = env('C0MPUTE_MODEL');
env('OPENAI_BASE_URL');
env('OPENAI_API_KEY');

// Request headers a browser sends without asking (the CORS-safelisted
// ones; content-type only for form and text types, not JSON).
const safelisted = new Set(['accept', 'accept-language', 'content-language']);
const simpleMethods = new Set(['GET', 'HEAD', 'POST']);
const preflighted = [];

async function browserFetch(url, init = {}) {
  const method = (init.method ?? 'GET').toUpperCase();
  const headers = new Headers(init.headers);
  const names = [...headers.keys()].filter((n) => !safelisted.has(n)).sort();
  const pre = await fetch(url, {
    method: 'OPTIONS',
    headers: { Origin: origin, 'Access-Control-Request-Method': method, 'Access-Control-Request-Headers': names.join(',') },
  });
  assert.ok(pre.ok, `preflight of ${method} ${url}: ${pre.status}`);
  assert.equal(pre.headers.get('access-control-allow-origin'), origin, `preflight of ${method} ${url}: origin not allowed`);
  const methods = (pre.headers.get('access-control-allow-methods') ?? '').split(',').map((m) => m.trim().toUpperCase());
  assert.ok(simpleMethods.has(method) || methods.includes(method), `${method} not allowed (${methods})`);
  const allowed = new Set((pre.headers.get('access-control-allow-headers') ?? '').split(',').map((h) => h.trim().toLowerCase()));
  for (const n of names) {
    // A wildcard never covers Authorization.
    assert.ok(allowed.has(n) || (allowed.has('*') && n !== 'authorization'), `header ${n} not allowed by the preflight (${[...allowed]})`);
  }
  preflighted.push({ method, names });
  headers.set('Origin', origin);
  const res = await fetch(url, { ...init, headers });
  assert.equal(res.headers.get('access-control-allow-origin'), origin, `${method} ${url}: the answer may not be read`);
  return res;
}

const client = new OpenAI({ fetch: browserFetch, maxRetries: 0, timeout: 60_000, dangerouslyAllowBrowser: true });

test('models.list', async () => {
  const page = await client.models.list();
  assert.ok(page.data.some((m) => m.id === model));
});

test('chat.completions.create', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 8 });
  assert.ok(r.choices[0].message.content.length > 0);
});

test('chat.completions.create, streaming', async () => {
  const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 8, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.ok(text.length > 0);
});

test('a DELETE', async () => {
  // A worker token that does not exist: the answer is an error the page
  // can read, after a preflight for DELETE.
  await assert.rejects(client.delete('/worker-tokens/cwt_missing'), (err) => err instanceof OpenAI.APIError && err.status >= 400);
  assert.ok(preflighted.some((p) => p.method === 'DELETE'));
});

test('the SDK sent its own headers, and each passed a preflight', () => {
  const names = new Set(preflighted.flatMap((p) => p.names));
  for (const n of ['authorization', 'content-type', 'x-stainless-lang', 'x-stainless-package-version', 'x-stainless-os', 'x-stainless-runtime', 'x-stainless-retry-count']) {
    assert.ok(names.has(n), `the SDK did not send ${n} (sent: ${[...names]})`);
  }
});
