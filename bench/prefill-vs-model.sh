#!/usr/bin/env bash
# Prompt tok/s of one long prompt through the three ways latte runs it, in one run:
#   model:  latte bench model -p N -n 0 -r 1        (one forward of N tokens, no engine)
#   engine: latte bench engine, 1 request of N random tokens + 1 output token
#           (the scheduler's chunked prefill; input tokens ÷ the run's seconds)
#   serve:  latte serve, then latte bench serve with 1 request of N tokens, max_tokens 1
#           (N ÷ its TTFT: HTTP, tokenizing and the engine's chunked prefill)
# Each side is timed warm: bench model after its warm-up run, bench engine after one
# --warmup-prompts request, the server after one request of other ids (WARMUP=0: the
# engine and the server cold, for lengths whose prefill dwarfs the first request's costs).
# per prompt length, the order rotating from round to round (the host's bandwidth drifts),
# with the ratio of each to bench model's tok/s of the same round.
#   bash bench/prefill-vs-model.sh MODEL_DIR [ROUNDS=2] [LENS=1024,4096,16384] [-- ENGINE FLAGS]
# ENGINE FLAGS go to bench engine and serve (e.g. --max-num-batched-tokens 2048). Every
# side reads the weights from --huge-pages: on a host that pages out cold file pages an
# mmapped model runs far slower and unevenly.
set -euo pipefail
model="$1"; rounds="${2:-2}"; lens="${3:-1024,4096,16384}"
shift $(($# < 3 ? $# : 3))
[[ "${1:-}" == "--" ]] && shift
engine_flags=("$@")
latte="${LATTE:-$(dirname "$0")/../build/latte}"
port="${PORT:-18437}"
warmup="${WARMUP:-1}"
tmp=$(mktemp -d)
server_pid=""
cleanup() { [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
last_json() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }

run_model() {  # $1: N
  "$latte" bench model --model "$model" --huge-pages -p "$1" -n 0 -r 1 --json 2>/dev/null | last_json tok_s_mean
}
run_engine() {
  "$latte" bench engine --model "$model" --huge-pages --num-prompts 1 --input-len "$1" --output-len 1 \
    --warmup-prompts "$warmup" "${engine_flags[@]}" --json 2>/dev/null |
    python3 -c "import json,sys; j=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(j['input_tokens']/j['seconds'])"
}
run_serve() {
  "$latte" serve --model "$model" --huge-pages --port "$port" "${engine_flags[@]}" >"$tmp/serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; exit 1; }
    sleep 0.5
  done
  seeds=(0)
  ((warmup)) && seeds=(1 0)  # 1: the warm-up
  for seed in "${seeds[@]}"; do
    "$latte" bench serve --base-url "http://127.0.0.1:$port" --input-len "$1" --output-len 1 --num-prompts 1 \
      --seed "$seed" --json "$tmp/serve.json" >/dev/null 2>&1
  done
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
  python3 -c "import json; j=json.load(open('$tmp/serve.json')); r=j['runs'][0]['requests'][0]; print($1/(r['ttft_ms']/1000))"
}

printf '%-7s %-5s %-22s %10s %10s %10s %13s %13s\n' N round order model engine serve engine/model serve/model
IFS=, read -ra lengths <<<"$lens"
sides=(model engine serve)
for n in "${lengths[@]}"; do
  for ((i = 0; i < rounds; i++)); do
    declare -A tok=()
    order=()
    for ((j = 0; j < 3; j++)); do order+=("${sides[$(((i + j) % 3))]}"); done
    for side in "${order[@]}"; do tok[$side]=$("run_$side" "$n"); done
    python3 -c "
m, e, s = ${tok[model]}, ${tok[engine]}, ${tok[serve]}
print(f'{$n:<7} {$i:<5} {\"${order[*]}\":<22} {m:10.1f} {e:10.1f} {s:10.1f} {e/m:13.3f} {s/m:13.3f}')"
  done
done
