#!/bin/bash
# The default model's accuracy table (docs/benchmarks.md): tasks/arith held-out set
# through `latte serve` and `latte eval` (lm-eval's gsm8k prompt, stops and scoring):
# bf16 and fp8 weights in each MLA mode, then three deliberately broken variants
# (patched copies of config.json) in absorbed mode. One lm-eval table per run, and one
# JSON file per run in OUT_DIR.
#   [SHOTS=2] bash train/eval_default.sh [OUT_DIR] [extra latte eval flags, e.g. --limit 500]
# 2-shot by default: the model was trained on sequences of 192 tokens, which hold two
# examples and a question; lm-eval's 5-shot prompt is twice that long.
set -euo pipefail
cd "$(dirname "$0")/.."
latte=${LATTE:-build/latte}
shots=${SHOTS:-2}
out=${1:-/tmp/eval_default}
shift || true
mkdir -p "$out"
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# eval_one MODEL_DIR MODE NAME [latte eval flags]: a server, one eval, the server stopped.
eval_one() {
  local model=$1 mode=$2 name=$3
  shift 3
  local log=$tmp/serve.log
  "$latte" serve --model "$model" --mla-mode "$mode" --memory-gb 1 --port 0 2>"$log" &
  server_pid=$!
  local port=
  for _ in $(seq 240); do
    port=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$') && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.5
  done
  [[ -n $port ]] || { echo "eval_default: latte serve did not start" >&2; exit 1; }
  echo "== $name, --mla-mode $mode"
  "$latte" eval --base-url "http://127.0.0.1:$port" --task tasks/arith/test.jsonl --concurrency 4 \
    --num-fewshot "$shots" --json "$out/$name-$mode.json" "$@"
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=
}

# patched NAME JSON: a copy of models/default (links to its files) with config.json
# patched (keys set to null are set to null; a nested object replaces keys inside).
patched() {
  local dir=$tmp/$1
  mkdir -p "$dir"
  for f in models/default/*; do [[ $(basename "$f") == config.json ]] || ln -s "$PWD/$f" "$dir/"; done
  python3 - "$2" "$dir/config.json" <<'EOF'
import json, sys
patch, path = json.loads(sys.argv[1]), sys.argv[2]
cfg = json.load(open("models/default/config.json"))
for k, v in patch.items():
    if isinstance(v, dict) and isinstance(cfg.get(k), dict):
        cfg[k].update(v)
    else:
        cfg[k] = v
json.dump(cfg, open(path, "w"), indent=2)
EOF
  echo "$dir"
}

for model in default default-fp8; do
  for mode in absorbed materialized naive; do eval_one "models/$model" "$mode" "$model" "$@"; done
done
# YaRN without its mscale: the softmax scale loses its mscale^2 (1.874 at factor 40).
eval_one "$(patched no-mscale '{"rope_scaling": {"mscale": 0, "mscale_all_dim": 0}}')" absorbed no-mscale "$@"
# No YaRN at all: plain rope frequencies and no mscale.
eval_one "$(patched no-yarn '{"rope_scaling": null}')" absorbed no-yarn "$@"
# A wrong rope base (rope_theta 100 instead of 10000): every pair rotates at the wrong rate.
eval_one "$(patched rope-theta-100 '{"rope_theta": 100.0}')" absorbed rope-theta-100 "$@"
