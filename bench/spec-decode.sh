#!/usr/bin/env bash
# Speculative decoding with the MTP layer, measured (docs/benchmarks.md):
#   1. the verify step: `latte bench model` tg steps of 1 token against steps of K + 1
#      tokens per sequence (--verify-tokens), batch 1 and 16, alternating in rounds;
#   2. the whole engine step with drafting: `latte bench engine` without and with
#      --speculative mtp (K = 1, 2) on a model whose MTP layer has random weights (so
#      nearly every draft is rejected: each step emits one token and its time is the
#      cost of a speculative step: the verify forward plus the MTP passes);
#   3. the acceptance per draft position on a trained model: `latte serve
#      --speculative mtp` with `latte eval` over a task, read from /metrics.
#   bash bench/spec-decode.sh MAIN_MODEL MTP_MODEL TRAINED_MODEL TASK OUT_DIR
# MAIN_MODEL: the model for 1 (no MTP layer needed); MTP_MODEL: one with an MTP layer
# (make-model --mtp-layers 1); TRAINED_MODEL and TASK: models/default and
# tasks/arith/test.jsonl. ROUNDS (default 3), LATTE (default build/latte).
set -euo pipefail
cd "$(dirname "$0")/.."
main=$1 mtp=$2 trained=$3 task=$4 out=$5
latte=${LATTE:-build/latte}
rounds=${ROUNDS:-3}
mkdir -p "$out"

verify_steps() {  # round
  for batch in 1 16; do
    for v in 1 2 3; do
      "$latte" bench model --model "$main" --huge-pages -p 0 -n 32 -r 3 --batch "$batch" --verify-tokens "$v" --json \
        >>"$out/verify-r$1.jsonl"
    done
  done
}

engine_steps() {  # round
  for conc in 1 16; do
    for k in 0 1 2; do
      local spec=(--speculative none)
      ((k > 0)) && spec=(--speculative mtp --num-speculative-tokens "$k")
      "$latte" bench engine --model "$mtp" --huge-pages --memory-gb 12 --num-prompts "$((conc * 2))" \
        --max-concurrency "$conc" --input-len 32 --output-len 48 --warmup-prompts 1 "${spec[@]}" --json \
        | python3 -c "import json,sys; r=json.load(sys.stdin); r['concurrency']=$conc; print(json.dumps(r))" \
          >>"$out/engine-r$1.jsonl"
    done
  done
}

acceptance() {
  local log=$out/serve.log port=
  "$latte" serve --model "$trained" --speculative mtp --num-speculative-tokens 3 --memory-gb 1 --port 0 2>"$log" &
  local pid=$!
  for _ in $(seq 120); do
    port=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$') && break
    sleep 0.5
  done
  "$latte" eval --base-url "http://127.0.0.1:$port" --task "$task" --num-fewshot 2 --limit 200 --concurrency 4 \
    --json "$out/eval-mtp.json" >"$out/eval-mtp.txt"
  curl -s "http://127.0.0.1:$port/metrics" | grep '^latte:spec_decode' >"$out/acceptance.txt"
  kill -TERM "$pid"
  wait "$pid" || true
}

"$latte" bench machine --json >"$out/machine.json"
for r in $(seq "$rounds"); do
  verify_steps "$r"
  engine_steps "$r"
done
acceptance
echo "results in $out"
