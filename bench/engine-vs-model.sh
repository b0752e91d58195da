#!/usr/bin/env bash
# The engine against the bare forward pass, alternating A B B A in one run (the host's
# memory bandwidth moves from minute to minute; a ratio per pair cancels most of it):
#   A: latte bench model -p 0 -n OUT --batch C   (C sequences decoding together, no engine)
#   B: latte bench engine: C requests of 16 random prompt tokens + OUT output tokens, all
#      at once (the same 16-token prompts bench model's tg test starts from)
# Prints one line per pair: both output tok/s, their ratio, and the engine's share of step
# time outside the forward pass.
#   bash bench/engine-vs-model.sh MODEL_DIR [ROUNDS=3] [OUT=128] [C=16]
# Both read the weights from --huge-pages (anonymous memory): on a host that pages out
# cold file pages (DAMON; docs/benchmarks.md), an mmapped model decodes far slower and
# unevenly.
set -euo pipefail
model="$1"; rounds="${2:-3}"; out="${3:-128}"; conc="${4:-16}"
latte="${LATTE:-$(dirname "$0")/../build/latte}"
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
printf '%-6s %14s %14s %8s %10s\n' round model_tok_s engine_tok_s ratio overhead
run_model() {
  a=$("$latte" bench model --model "$model" --huge-pages -p 0 -n "$out" --batch "$conc" -r 1 --json 2>/dev/null | field tok_s_mean)
}
run_engine() {
  b_json=$("$latte" bench engine --model "$model" --huge-pages --num-prompts "$conc" --input-len 16 --output-len "$out" \
           --max-concurrency "$conc" --json 2>/dev/null)
}
for ((i = 1; i <= rounds; i++)); do
  # One timed run each, so both sides of a pair last about as long; the order alternates.
  if ((i % 2)); then run_model; run_engine; else run_engine; run_model; fi
  b=$(field output_tok_s <<<"$b_json")
  overhead=$(field overhead_share <<<"$b_json")
  python3 -c "print(f'{$i:<6} {$a:14.1f} {$b:14.1f} {$b/$a:8.3f} {100*$overhead:9.2f}%')"
done
