// Writes ~1 MB of mixed text for the tokenizer speed comparison (docs/benchmarks.md):
// English prose, code, Chinese, Japanese, Korean, Arabic, emoji and numbers, shuffled
// deterministically.   node bench_text.js OUT_FILE [BYTES]
'use strict';
const fs = require('fs');
const parts = [
  'The quick brown fox jumps over the lazy dog. ', 'Multi-head latent attention compresses the KV cache. ',
  "It's what they'd said: we'll see, you're right. ", 'In 2024, revenue rose 12.5% to $3,141,592.65.\n',
  'def forward(self, x):\n    return self.w2(F.silu(self.w1(x)) * self.w3(x))\n',
  'for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n', '    if err != nil {\n        return err\n    }\n',
  '我们今天去公园散步，天气很好。', '深度求索发布了新的语言模型。', 'こんにちは、世界。日本語のテキストです。',
  '한국어 텍스트를 토큰화합니다. ', 'مرحبا بالعالم، هذا نص عربي. ', 'Привет, мир! ', '😀👍🏽👨‍👩‍👧‍👦 ',
  '\n\n', '   ', 'https://example.com/a/b?c=d&e=f ', '<｜User｜>', '<｜Assistant｜>',
];
let seed = 12345;
const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
const target = Number(process.argv[3] || 1000000);
let out = '';
while (Buffer.byteLength(out) < target) out += parts[next() % parts.length];
fs.writeFileSync(process.argv[2], out);
