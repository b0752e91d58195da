// Renders a chat template with @huggingface/jinja and tokenizes the result with
// Hugging Face's tokenizers (no special tokens added: the template writes BOS), the
// reference for the rendered ids of tests/chat_template_test.cc.
//   node render_and_tokenize.js INPUT.json TOKENIZER_JSON
// INPUT.json: {"template": "...", "contexts": [...]}. Prints a JSON array of
// {"text": "...", "ids": [...]}, one per context.
"use strict";
const fs = require("fs");
const { Template } = require("@huggingface/jinja");
const { Tokenizer } = require("tokenizers");

async function main() {
  const [inputPath, tokenizerPath] = process.argv.slice(2);
  const input = JSON.parse(fs.readFileSync(inputPath, "utf8"));
  const template = new Template(input.template);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const out = [];
  for (const context of input.contexts) {
    const text = template.render(context);
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    out.push({ text, ids: Array.from(encoding.getIds()) });
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + "\n");
  process.exit(1);
});
