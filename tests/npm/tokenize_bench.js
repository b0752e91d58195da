// Reference encoding speed: Hugging Face's tokenizers (Rust, via Node) on FILE.
//   node tokenize_bench.js TOKENIZER_JSON FILE [REPEATS]
// Prints MB/s of the first pass (empty cache) and the best of REPEATS, encode() of
// the whole file as one string without special tokens, like `latte tokenize --bench`.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tokenizerPath, file, repeatsArg] = process.argv.slice(2);
  const repeats = Number(repeatsArg || 5);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const text = fs.readFileSync(file, 'utf8');
  const bytes = Buffer.byteLength(text);
  let best = Infinity, first = 0, tokens = 0;
  for (let r = 0; r < repeats; ++r) {
    const t0 = process.hrtime.bigint();
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    tokens = encoding.getIds().length;
    if (r === 0) first = s;
    best = Math.min(best, s);
  }
  const mb = bytes / 1e6;
  console.log(`tokenizers ${require('tokenizers/package.json').version}: ${bytes} bytes, ${tokens} tokens, ` +
              `first pass ${(mb / first).toFixed(1)} MB/s, best of ${repeats} ${(mb / best).toFixed(1)} MB/s`);
}
main().catch((e) => { console.error(e); process.exit(1); });
