#!/bin/bash
# The default model's accuracy table (docs/benchmarks.md): tasks/arith held-out set,
# 2-shot, greedy, through `latte generate`: bf16 and fp8 weights in each MLA mode, then
# three deliberately broken variants (patched copies of config.json) in absorbed mode.
#   bash tools/train/eval_default.sh [OUT.jsonl] [extra eval_arith.py flags, e.g. -j 4]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/eval_default.jsonl}
shift || true
: > "$out"
python3 tools/eval_arith.py --model models/default --model models/default-fp8 --json "$out" "$@"
# YaRN without its mscale: the softmax scale loses its mscale^2 (1.874 at factor 40).
python3 tools/eval_arith.py --model models/default --mla-mode absorbed --json "$out" \
  --patch-config '{"rope_scaling": {"mscale": 0, "mscale_all_dim": 0}}' "$@"
# No YaRN at all: plain rope frequencies and no mscale.
python3 tools/eval_arith.py --model models/default --mla-mode absorbed --json "$out" \
  --patch-config '{"rope_scaling": null}' "$@"
# A wrong rope base (rope_theta 100 instead of 10000): every pair rotates at the wrong rate.
python3 tools/eval_arith.py --model models/default --mla-mode absorbed --json "$out" \
  --patch-config '{"rope_theta": 100.0}' "$@"
