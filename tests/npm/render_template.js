// Renders a chat template with Hugging Face's own Jinja implementation
// (@huggingface/jinja), the reference tests/chat_template_test.cc compares with.
//   node render_template.js INPUT.json
// INPUT.json: {"template": "...", "contexts": [{messages, add_generation_prompt, ...}, ...]}
// Prints a JSON array, one entry per context: {"ok": true, "text": "..."} or
// {"ok": false, "error": "..."}.
"use strict";
const fs = require("fs");
const { Template } = require("@huggingface/jinja");

const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const template = new Template(input.template);
const results = input.contexts.map((context) => {
  try {
    return { ok: true, text: template.render(context) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(results));
