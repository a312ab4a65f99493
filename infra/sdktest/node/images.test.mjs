// The official OpenAI Node SDK's images.generate, unchanged, against the
// c0mpute gateway's POST /v1/images/generations.
//
// Run by infra/devnet TestNodeSDKImages (go test ./infra/devnet -run
// TestNodeSDKImages), which starts a whole local network with an image
// model served by workerd's comfyui backend (on a ComfyUI stand-in) and
// passes:
//
//   OPENAI_BASE_URL        the gateway's …/v1 (the SDK reads it itself)
//   OPENAI_API_KEY         a key with credits (the SDK reads it itself)
//   C0MPUTE_IMAGE_MODEL    the image model
//   C0MPUTE_CHAT_MODEL     a chat model of the same network
//   C0MPUTE_IMAGE_SIZE     a size the image model offers, WIDTHxHEIGHT
//
// The Go side counts what the run was charged.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set; run this through go test ./infra/devnet -run TestNodeSDKImages`);
  return v;
}

env('OPENAI_BASE_URL');
env('OPENAI_API_KEY');
const model = env('C0MPUTE_IMAGE_MODEL');
const chatModel = env('C0MPUTE_CHAT_MODEL');
const size = env('C0MPUTE_IMAGE_SIZE');
const [width, height] = size.split('x').map(Number);

const client = new OpenAI({ maxRetries: 0, timeout: 60_000 });

// pngSize reads a PNG's width and height from its IHDR chunk.
function pngSize(buf) {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.ok(buf.subarray(0, 8).equals(signature), 'not a PNG');
  assert.equal(buf.subarray(12, 16).toString('latin1'), 'IHDR');
  return [buf.readUInt32BE(16), buf.readUInt32BE(20)];
}

test('images.generate returns one inline PNG of the size asked for', async () => {
  const res = await client.images.generate({ model, prompt: 'a lighthouse at dusk', size, response_format: 'b64_json' });
  assert.equal(res.data.length, 1);
  assert.ok(res.created > 0);
  assert.equal(res.data[0].url, undefined);
  assert.deepEqual(pngSize(Buffer.from(res.data[0].b64_json, 'base64')), [width, height]);
});

async function refused(params, param) {
  await assert.rejects(client.images.generate({ model, prompt: 'p', response_format: 'b64_json', ...params }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `${err}`);
    assert.equal(err.status, 400);
    assert.equal(err.param, param);
    return true;
  });
}

test('n other than 1 is a 400 naming n', () => refused({ n: 2 }, 'n'));
test('response_format url is a 400 naming response_format', () => refused({ response_format: 'url' }, 'response_format'));
test('a chat model is a 400 naming model', () => refused({ model: chatModel }, 'model'));
