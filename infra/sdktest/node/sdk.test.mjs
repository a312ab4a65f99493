// The official OpenAI Node SDK, unchanged, against the c0mpute gateway.
//
// Run by infra/devnet TestNodeSDK (go test ./infra/devnet -run TestNodeSDK),
// which starts a whole local network and passes:
//
//   OPENAI_BASE_URL      the gateway's …/v1 (the SDK reads it itself)
//   OPENAI_API_KEY       a key with credits (the SDK reads it itself)
//   C0MPUTE_MODEL        the model to ask for ("tiny")
//   C0MPUTE_EXPECT_JSON  a JSON file: each case's request (without model) and
//                        the reply the same backend gives it directly, plus
//                        keys and limits for the error cases
//
// Tests run one after another; each request on the main key counts against
// the per-key rate limit the Go side sets (see node_sdk_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set; run this through go test ./infra/devnet -run TestNodeSDK`);
  return v;
}

env('OPENAI_BASE_URL');
env('OPENAI_API_KEY');
const model = env('C0MPUTE_MODEL');
const expect = JSON.parse(readFileSync(env('C0MPUTE_EXPECT_JSON'), 'utf8'));

// The client takes base URL and key from the environment, as users' code does.
const client = new OpenAI({ maxRetries: 0, timeout: 60_000 });

function kase(name) {
  const c = expect.cases[name];
  assert.ok(c, `case ${name} missing from ${process.env.C0MPUTE_EXPECT_JSON}`);
  return c;
}

function params(c, extra = {}) {
  return { ...structuredClone(c.request), model, ...extra };
}

function assertUsage(usage, c) {
  assert.ok(usage, 'usage missing');
  assert.equal(usage.prompt_tokens, c.prompt_tokens, 'prompt_tokens');
  assert.equal(usage.completion_tokens, c.completion_tokens, 'completion_tokens');
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, 'total_tokens');
}

// Streams a request and returns its chunks.
async function collect(p) {
  const stream = await client.chat.completions.create({ ...p, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

// Checks what every stream shares: one id, the chunk object, the role
// first, the content, the finish reason.
function assertStream(chunks, c) {
  assert.ok(chunks.length >= 3, `only ${chunks.length} chunks`);
  const id = chunks[0].id;
  assert.match(id, /^chatcmpl-/);
  for (const ch of chunks) {
    assert.equal(ch.id, id, 'id changes between chunks');
    assert.equal(ch.object, 'chat.completion.chunk');
    assert.equal(ch.model, model);
    assert.equal(typeof ch.created, 'number');
  }
  const withChoices = chunks.filter((ch) => ch.choices.length > 0);
  assert.equal(withChoices[0].choices[0].delta.role, 'assistant', 'first delta carries the role');
  const text = withChoices.map((ch) => ch.choices[0].delta.content ?? '').join('');
  assert.equal(text, c.content, 'streamed content differs from the backend');
  const finishes = withChoices.map((ch) => ch.choices[0].finish_reason).filter((f) => f != null);
  assert.deepEqual(finishes, [c.finish_reason], 'exactly one finish_reason');
  assert.equal(withChoices.at(-1).choices[0].finish_reason, c.finish_reason, 'finish_reason on the last choice chunk');
}

test('chat.completions.create: reply, usage and ids as the backend gives them', async () => {
  const c = kase('basic');
  const { data: res, response } = await client.chat.completions.create(params(c)).withResponse();
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
  assert.match(res.id, /^chatcmpl-/);
  assert.equal(res.object, 'chat.completion');
  assert.equal(res.model, model);
  assert.equal(typeof res.created, 'number');
  assert.ok(Math.abs(res.created - Date.now() / 1000) < 300, `created ${res.created} is not now`);
  assert.equal(res.choices.length, 1);
  const [choice] = res.choices;
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, 'assistant');
  assert.ok(c.content.length > 0, 'the backend gave an empty reply');
  assert.equal(choice.message.content, c.content);
  assert.equal(choice.finish_reason, c.finish_reason);
  assertUsage(res.usage, c);
});

test('stream with include_usage: usage null on every chunk, then one usage chunk with no choices', async () => {
  const c = kase('basic');
  const chunks = await collect(params(c, { stream_options: { include_usage: true } }));
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, [], 'last chunk has choices []');
  assertUsage(last.usage, c);
  for (const ch of chunks.slice(0, -1)) {
    assert.equal(ch.usage, null, `chunk before the last has usage ${JSON.stringify(ch.usage)}`);
    assert.equal(ch.choices.length, 1);
  }
  assertStream(chunks, c);
});

test('stream without include_usage: no usage anywhere, non-ASCII prompt', async () => {
  const c = kase('unicode');
  const chunks = await collect(params(c));
  for (const ch of chunks) {
    assert.equal(ch.usage ?? null, null, `usage without include_usage: ${JSON.stringify(ch.usage)}`);
    assert.equal(ch.choices.length, 1);
  }
  assertStream(chunks, c);
});

test('chat.completions.stream helper: events and finalChatCompletion()', async () => {
  const c = kase('helper');
  const stream = client.chat.completions.stream(params(c, { stream_options: { include_usage: true } }));
  let deltas = '';
  let snapshot = '';
  let chunkEvents = 0;
  stream.on('chunk', () => chunkEvents++);
  stream.on('content', (delta, snap) => {
    deltas += delta;
    snapshot = snap;
  });
  const final = await stream.finalChatCompletion();
  assert.equal(deltas, c.content);
  assert.equal(snapshot, c.content);
  assert.ok(chunkEvents >= 3, `${chunkEvents} chunk events`);
  assert.match(final.id, /^chatcmpl-/);
  assert.equal(final.object, 'chat.completion');
  assert.equal(final.model, model);
  assert.equal(final.choices.length, 1);
  assert.equal(final.choices[0].message.role, 'assistant');
  assert.equal(final.choices[0].message.content, c.content);
  assert.equal(final.choices[0].finish_reason, c.finish_reason);
  assertUsage(final.usage, c);
  assert.equal(await stream.finalContent(), c.content);
  assertUsage(await stream.totalUsage(), c);
});

test('stop as an array and as a string ends the reply before the stop word', async () => {
  const c = kase('stop');
  assert.ok(Array.isArray(c.request.stop) && c.request.stop.length === 1);
  const word = c.request.stop[0];
  for (const stop of [[word], word]) {
    const res = await client.chat.completions.create(params(c, { stop }));
    const text = res.choices[0].message.content;
    assert.equal(text, c.content, `stop ${JSON.stringify(stop)}`);
    assert.ok(!text.includes(word), `reply ${JSON.stringify(text)} contains the stop word ${JSON.stringify(word)}`);
    assert.equal(res.choices[0].finish_reason, 'stop');
    assertUsage(res.usage, c);
  }
  // The same through a stream.
  assertStream(await collect(params(c)), c);
});

test("max_tokens cuts the reply with finish_reason 'length'", async () => {
  const c = kase('length');
  assert.equal(c.finish_reason, 'length');
  const res = await client.chat.completions.create(params(c));
  assert.equal(res.choices[0].finish_reason, 'length');
  assert.equal(res.choices[0].message.content, c.content);
  assert.equal(res.usage.completion_tokens, c.request.max_tokens);
  assertUsage(res.usage, c);
  assertStream(await collect(params(c)), c);
});

// Asserts that fn rejects with an instance of cls carrying the status,
// type, code and param of an OpenAI error body.
async function assertAPIError(fn, cls, { status, type, code, param = null }) {
  await assert.rejects(fn, (err) => {
    assert.ok(err instanceof cls, `got ${err?.constructor?.name}: ${err?.message}`);
    assert.ok(err instanceof OpenAI.APIError);
    assert.equal(err.status, status);
    assert.equal(err.type, type);
    assert.equal(err.code, code);
    assert.equal(err.param, param);
    assert.equal(typeof err.error?.message, 'string');
    assert.ok(err.message.startsWith(`${status} `), err.message);
    return true;
  });
}

test('bad API key: AuthenticationError (401)', async () => {
  const bad = new OpenAI({ apiKey: 'sk-c0mpute-nope', maxRetries: 0 });
  const want = { status: 401, type: 'authentication_error', code: 'invalid_api_key' };
  await assertAPIError(() => bad.chat.completions.create(params(kase('basic'))), OpenAI.AuthenticationError, want);
  await assertAPIError(() => bad.chat.completions.create({ ...params(kase('basic')), stream: true }),
    OpenAI.AuthenticationError, want);
});

test('unknown model: NotFoundError (404), for create, stream and models.retrieve', async () => {
  const want = { status: 404, type: 'invalid_request_error', code: 'model_not_found', param: 'model' };
  const p = { ...params(kase('basic')), model: 'no-such-model' };
  await assertAPIError(() => client.chat.completions.create(p), OpenAI.NotFoundError, want);
  await assertAPIError(() => client.chat.completions.create({ ...p, stream: true }), OpenAI.NotFoundError, want);
  await assertAPIError(() => client.models.retrieve('no-such-model'), OpenAI.NotFoundError, want);
});

test('invalid parameter: BadRequestError (400) naming the parameter', async () => {
  const want = { status: 400, type: 'invalid_request_error', code: 'invalid_request', param: 'temperature' };
  const p = params(kase('basic'), { temperature: 5 });
  await assertAPIError(() => client.chat.completions.create(p), OpenAI.BadRequestError, want);
  await assertAPIError(() => client.chat.completions.create({ ...p, stream: true }), OpenAI.BadRequestError, want);
});

test('no credits: APIError (402 insufficient_quota)', async () => {
  const poor = new OpenAI({ apiKey: expect.poor_key, maxRetries: 0 });
  const p = params(kase('length'));
  await assertAPIError(() => poor.chat.completions.create(p), OpenAI.APIError,
    { status: 402, type: 'insufficient_quota', code: 'insufficient_quota' });
});

test('rate limit: RateLimitError (429) with Retry-After', async () => {
  const limited = new OpenAI({ apiKey: expect.limited_key, maxRetries: 0 });
  const p = params(kase('length'), { max_tokens: 1 });
  // The window is a calendar minute: one that rolls over mid-loop resets
  // the count, so allow two windows' worth.
  let err;
  for (let i = 0; i <= 2 * expect.rate_per_minute && !err; i++) {
    try {
      await limited.chat.completions.create(p);
    } catch (e) {
      err = e;
    }
  }
  assert.ok(err, `no error after ${2 * expect.rate_per_minute + 1} requests`);
  assert.ok(err instanceof OpenAI.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
  assert.equal(err.status, 429);
  assert.equal(err.type, 'rate_limit_error');
  assert.equal(err.code, 'rate_limit_exceeded');
  const retryAfter = Number(err.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 61, `Retry-After ${err.headers.get('retry-after')}`);
});

test('models.list: the model is listed, available, with pricing', async () => {
  const ids = [];
  let tiny;
  for await (const m of client.models.list()) {
    ids.push(m.id);
    assert.equal(m.object, 'model');
    if (m.id === model) tiny = m;
  }
  assert.ok(tiny, `${model} not in ${JSON.stringify(ids)}`);
  assert.equal(tiny.available, true);
  assert.equal(typeof tiny.owned_by, 'string');
  assert.equal(typeof tiny.created, 'number');
  assert.equal(tiny.pricing?.credits_per_request, expect.price_credits);
  assert.equal(typeof tiny.pricing?.usd_per_request, 'string');

  const page = await client.models.list();
  assert.ok(page.data.some((m) => m.id === model));
  assert.equal(page.hasNextPage(), false);
});

test('models.retrieve', async () => {
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
  assert.equal(m.object, 'model');
  assert.equal(typeof m.owned_by, 'string');
  assert.equal(typeof m.created, 'number');
  assert.equal(m.available, true);
  assert.equal(m.pricing?.credits_per_request, expect.price_credits);
});
