// llama.cpp itself, through node-llama-cpp (its prebuilt CPU binaries), as the oracle
// for latte's GGUF reading: for each case on stdin, a greedy run from the prompt ids,
// and at every step the next-token probabilities llama.cpp computes (temperature 1,
// no other sampling option). Also tokenizes texts with the file's own vocabulary.
//
// stdin: one JSON object per line:
//   {"model": "x.gguf", "prompt": [ids...], "steps": N, "top": K}
//   {"model": "x.gguf", "tokenize": ["text", ...]}
// stdout: one JSON object per line:
//   {"steps": [{"token": id, "top": [[id, logprob], ...]}, ...]}
//   {"tokens": [[ids...], ...]}
import readline from "node:readline";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const models = new Map();

async function loadModel(path) {
  if (!models.has(path)) models.set(path, await llama.loadModel({modelPath: path, gpuLayers: 0, useMmap: true}));
  return models.get(path);
}

async function greedy(model, prompt, steps, top) {
  const context = await model.createContext({contextSize: 512, batchSize: 512, threads: 1, sequences: 1});
  const sequence = context.getSequence();
  const out = [];
  let input = prompt.map((id, i) => (i === prompt.length - 1 ? [id, {generateNext: {probabilities: true}}] : id));
  for (let s = 0; s < steps; ++s) {
    const results = await sequence.controlledEvaluate(input);
    const next = results[input.length - 1].next;
    const entries = [...next.probabilities.entries()];
    const token = entries[0][0];
    out.push({token, top: entries.slice(0, top).map(([id, p]) => [id, Math.log(p)])});
    input = [[token, {generateNext: {probabilities: true}}]];
  }
  await context.dispose();
  return out;
}

const lines = readline.createInterface({input: process.stdin});
for await (const line of lines) {
  if (!line.trim()) continue;
  const request = JSON.parse(line);
  const model = await loadModel(request.model);
  if (request.tokenize) {
    const tokens = request.tokenize.map((text) => Array.from(model.tokenize(text, true)));
    process.stdout.write(JSON.stringify({tokens}) + "\n");
  } else {
    const steps = await greedy(model, request.prompt, request.steps, request.top ?? 5);
    process.stdout.write(JSON.stringify({steps}) + "\n");
  }
}
await llama.dispose();
