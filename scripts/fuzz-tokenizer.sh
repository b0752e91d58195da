#!/usr/bin/env bash
# Fuzzes the tokenizer with libFuzzer (clang + AddressSanitizer/UBSan) for a bounded
# time on DeepSeek-V3's tokenizer.json. Not part of CI. Needs clang and
# libclang-rt-14-dev (Debian 12), and tests/npm installed (`cd tests/npm && npm ci`).
#   bash scripts/fuzz-tokenizer.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
out=build-fuzz
mkdir -p "$out/corpus"
# Only the tokenizer's own sources: the rest of src/text (templates) is not needed.
srcs=(fuzz/tokenizer_fuzz.cc src/text/tokenizer.cc src/text/bpe.cc src/text/pre_tokenizer.cc
      src/text/regex.cc src/text/added_tokens.cc src/text/byte_level.cc src/text/detokenizer.cc
      src/text/utf8.cc)
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc \
  "${srcs[@]}" $(pkg-config --cflags --libs libpcre2-8) -o "$out/tokenizer_fuzz"
# Seeds: a few strings with special tokens, CJK, emoji and broken UTF-8.
printf '<｜begin▁of▁sentence｜><｜User｜>Hi 123' >"$out/corpus/seed1"
printf '你好 こんにちは 😀👨‍👩‍👧 \xf0\x9f\x98 \xff\t\n  x' >"$out/corpus/seed2"
"$out/tokenizer_fuzz" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 "$out/corpus"
