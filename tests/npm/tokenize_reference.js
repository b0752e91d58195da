// Reference tokenizer for tests/tokenizer_test.cc: Hugging Face's tokenizers (Rust,
// through its Node binding) on a tokenizer.json.
//
//   node tokenize_reference.js TOKENIZER_JSON < in.jsonl > out.jsonl
//
// in.jsonl: one JSON string per line. out.jsonl: one line per input line,
// {"ids": [...], "decoded": "..."}: the ids of encode(text) without special tokens
// added (no BOS), and decode(ids) with special tokens kept.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tokenizerPath] = process.argv.slice(2);
  if (!tokenizerPath) throw new Error('usage: node tokenize_reference.js TOKENIZER_JSON < in.jsonl');
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const lines = fs.readFileSync(0, 'utf8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const out = [];
  for (const line of lines) {
    const text = JSON.parse(line);
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(encoding.getIds());
    const decoded = await tokenizer.decode(ids, false);
    out.push(JSON.stringify({ ids, decoded }));
  }
  fs.writeFileSync(1, out.join('\n') + (out.length ? '\n' : ''));
}

main().catch((e) => {
  process.stderr.write(`tokenize_reference.js: ${e.stack || e}\n`);
  process.exit(1);
});
