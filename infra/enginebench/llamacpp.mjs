// The llama.cpp side of the engine benchmark (workerd/engine
// BenchmarkVersusLlamaCpp): loads one GGUF file with node-llama-cpp's
// prebuilt CPU build (no GPU, never compiles), then answers one JSON line
// per request line on stdin, so the Go benchmark can interleave its own
// runs with these in one process lifetime.
//
//   node llamacpp.mjs MODEL.gguf THREADS
//
// First line out: {"ready":true,"backend":"...","threads":N}.
// Each request: {"prompt":[token ids],"tokens":N}; each answer:
// {"prefill_ms","decode_ms","prefill_cpu_ms","decode_cpu_ms","tokens",
// "flashAttention"}: prefill_ms is the time from submitting the prompt to
// the first greedy token (the prompt in one batch), decode_ms the time of
// the N one-token steps after it (what the Go benchmark times for its own
// engine), the _cpu_ms the process's CPU time (user and system, all
// threads) over the same spans, tokens the N greedy tokens after the
// first, flashAttention whether llama.cpp's default "auto" chose flash
// attention (as its log said by then). Requests are bounded (64 KiB a
// line, 256 prompt tokens, 256 generated). Errors are one line
// {"error":"..."} and exit status 1.
import { createInterface } from "node:readline";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function fail(msg) {
  process.stdout.write(JSON.stringify({ error: msg }) + "\n");
  process.exit(1);
}

const [modelPath, threadsArg] = process.argv.slice(2);
const threads = Number(threadsArg);
if (!modelPath || !Number.isInteger(threads) || threads < 1 || threads > 256) {
  fail("usage: node llamacpp.mjs MODEL.gguf THREADS (THREADS a whole number from 1 to 256)");
}

// llama.cpp names the CPU variant it loads and whether it fused flash
// attention in its log lines; keep those, drop the rest.
let backend = "";
let flash = false;
const llama = await getLlama({
  gpu: false,
  build: "never",
  maxThreads: threads,
  logLevel: LlamaLogLevel.debug,
  logger: (level, message) => {
    const m = /loaded CPU backend from (\S+)/.exec(message);
    if (m && !backend) backend = m[1].split("/").pop();
    if (/Flash Attention enabled/.test(message)) flash = true;
  },
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({ contextSize: 512, batchSize: 512, threads: { ideal: threads, min: threads } });
const sequence = context.getSequence();
process.stdout.write(JSON.stringify({ ready: true, backend, threads: context.currentThreads }) + "\n");

const maxPrompt = 256;
const maxTokens = 256;
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.length > 1 << 16) fail(`request line of ${line.length} bytes: at most 65536`);
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    fail(`request is not JSON: ${e.message}`);
  }
  const { prompt, tokens } = req ?? {};
  if (!Array.isArray(prompt) || prompt.length < 1 || prompt.length > maxPrompt || !prompt.every(Number.isInteger)) {
    fail(`prompt must be 1 to ${maxPrompt} token ids`);
  }
  if (!Number.isInteger(tokens) || tokens < 1 || tokens > maxTokens) {
    fail(`tokens must be a whole number from 1 to ${maxTokens}`);
  }
  await sequence.clearHistory();
  const out = [];
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  let first = 0n;
  let cpu1;
  for await (const t of sequence.evaluate(prompt, { temperature: 0 })) {
    if (first === 0n) {
      first = process.hrtime.bigint();
      cpu1 = process.cpuUsage();
      continue;
    }
    out.push(t);
    if (out.length === tokens) break;
  }
  const end = process.hrtime.bigint();
  const cpu2 = process.cpuUsage();
  const cpuMS = (a, b) => (b.user + b.system - a.user - a.system) / 1000;
  if (out.length !== tokens) fail(`generation stopped after ${out.length} of ${tokens} tokens`);
  process.stdout.write(
    JSON.stringify({
      prefill_ms: Number(first - start) / 1e6,
      decode_ms: Number(end - first) / 1e6,
      prefill_cpu_ms: cpuMS(cpu0, cpu1),
      decode_cpu_ms: cpuMS(cpu1, cpu2),
      tokens: out,
      flashAttention: flash,
    }) + "\n",
  );
}
await context.dispose();
await model.dispose();
