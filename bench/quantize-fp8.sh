#!/usr/bin/env bash
# 8-bit decode against bf16, alternating the loads in each round (the host's memory
# bandwidth moves from minute to minute; a ratio within a round cancels most of it):
#   A: the bf16 checkpoint as stored
#   B: the bf16 checkpoint with --quantize fp8 (every linear weight, lm_head included,
#      quantized at load to e4m3 in 128x128 blocks)
#   C: make-model's fp8 export of the same seed (lm_head bf16, as DeepSeek ships it)
#   D: the fp8 export with --quantize fp8 (its bf16 lm_head quantized at load)
# Each is `latte bench model -p 0 -n N -r R` (tg only) in its own process; the peak RSS
# of the process (/usr/bin/time) is printed beside it. One line per round: tok/s of each
# and the ratios B/A, C/A, D/A, B/D.
#   bash bench/quantize-fp8.sh BF16_DIR FP8_DIR [ROUNDS=3] [N=64] [R=3]
set -euo pipefail
bf16="$1"; fp8="$2"; rounds="${3:-3}"; gen="${4:-64}"; reps="${5:-3}"
latte="${LATTE:-$(dirname "$0")/../build/latte}"
# tok/s and max RSS (GB) of one bench model run.
run() {
  local log; log=$(mktemp)
  local json
  json=$(/usr/bin/time -f 'maxrss_kb %M' -o "$log" "$latte" bench model --model "$1" -p 0 -n "$gen" -r "$reps" \
         --json "${@:2}" 2>/dev/null | tail -1)
  python3 -c "import json,sys; j=json.loads(sys.argv[1]); print(f\"{j['tok_s_mean']:.2f} {j['tok_s_sd']:.2f}\", end=' ')" "$json"
  awk '/maxrss_kb/ {printf "%.2f\n", $2 / 1e6}' "$log"
  rm -f "$log"
}
printf '%-5s | %-22s | %-22s | %-22s | %-22s | %6s %6s %6s %6s\n' round "A bf16 tok/s (RSS GB)" \
  "B bf16 --quantize fp8" "C fp8 export" "D fp8 --quantize fp8" B/A C/A D/A B/D
for ((i = 1; i <= rounds; i++)); do
  read -r a sa ra <<<"$(run "$bf16")"
  read -r b sb rb <<<"$(run "$bf16" --quantize fp8)"
  read -r c sc rc <<<"$(run "$fp8")"
  read -r d sd rd <<<"$(run "$fp8" --quantize fp8)"
  python3 -c "
a,b,c,d=$a,$b,$c,$d
print(f'{$i:<5} | {a:8.2f} ± {$sa:<5.2f} ({$ra:.2f}) | {b:8.2f} ± {$sb:<5.2f} ({$rb:.2f}) | '
      f'{c:8.2f} ± {$sc:<5.2f} ({$rc:.2f}) | {d:8.2f} ± {$sd:<5.2f} ({$rd:.2f}) | '
      f'{b/a:6.3f} {c/a:6.3f} {d/a:6.3f} {b/d:6.3f}')"
done
