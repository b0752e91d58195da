#!/usr/bin/env bash
# The cost of constrained decoding: output tok/s of one `latte serve` at C sequences
# decoding at once, without a response_format and with a JSON schema (or json_object),
# alternating A B A B in one server, with the ratio B / A of each pair and the median.
#   bash bench/structured-output.sh MODEL_DIR [ROUNDS=3] [-- SERVE FLAGS]
# Environment: CONCURRENCY (16), PROMPTS (48 per run), INPUT_LEN (32), OUTPUT_LEN (128),
# FORMAT (the response_format; default a schema of objects with strings and integers
# that a random model keeps filling), PORT.
# The constrained outputs end when their JSON is complete, so their token counts are the
# server's usage; tok/s is output tokens over each run's wall time either way.
set -euo pipefail
model="$1"; rounds="${2:-3}"
shift $(($# < 2 ? $# : 2))
[[ "${1:-}" == "--" ]] && shift
serve_flags=("$@")
latte="${LATTE:-$(dirname "$0")/../build/latte}"
port="${PORT:-18441}"
concurrency="${CONCURRENCY:-16}"
prompts="${PROMPTS:-48}"
schema='{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"qty":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","qty","tags"],"additionalProperties":false}},"note":{"type":"string"}},"required":["items","note"],"additionalProperties":false}'
format="${FORMAT:-{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"order\",\"schema\":$schema}}}"
tmp=$(mktemp -d)
server_pid=""
cleanup() { [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

"$latte" serve --model "$model" --huge-pages --port "$port" --max-num-seqs "$concurrency" "${serve_flags[@]}" \
  >"$tmp/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do
  grep -q "listening on" "$tmp/serve.log" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/serve.log"; exit 1; }
  sleep 0.5
done

run() {  # $1: label, then extra bench serve flags; prints "tok/s output_tokens"
  local label="$1"; shift
  "$latte" bench serve --base-url "http://127.0.0.1:$port" --input-len "${INPUT_LEN:-32}" \
    --output-len "${OUTPUT_LEN:-128}" --num-prompts "$prompts" --max-concurrency "$concurrency" \
    --seed "$RANDOM" --json "$tmp/$label.json" "$@" >/dev/null 2>&1 || true
  python3 -c "import json; r=json.load(open('$tmp/$label.json'))['runs'][0]; print(r['output_throughput'], r['total_output_tokens'], r['failed'])"
}

run warmup >/dev/null
run warmup --response-format "$format" >/dev/null
echo "round  plain_tok/s  schema_tok/s  schema/plain  (output tokens plain, schema; failed)"
ratios=()
for r in $(seq "$rounds"); do
  read -r a a_tokens a_failed < <(run plain)
  read -r b b_tokens b_failed < <(run schema --response-format "$format")
  ratio=$(python3 -c "print(f'{$b / $a:.3f}')")
  ratios+=("$ratio")
  printf "%5d  %11.2f  %12.2f  %12s  (%s, %s; %s, %s)\n" "$r" "$a" "$b" "$ratio" "$a_tokens" "$b_tokens" "$a_failed" "$b_failed"
done
python3 -c "import statistics; print('median schema/plain:', statistics.median([float(x) for x in '${ratios[*]}'.split()]))"
