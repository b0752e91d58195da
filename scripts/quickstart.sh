#!/usr/bin/env bash
# The main job on an embedded default: build, start `latte serve` on the default model
# (models/default, the trained one, when it is there; else a tiny random model), ask it
# once through /v1/completions and once through /v1/chat/completions with curl, print
# the answers, and stop the server (SIGINT: it exits 0). It ends by printing the command
# that keeps a server up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [ -f models/default/config.json ]; then
  model=models/default
else
  if [ ! -f models/tiny/config.json ]; then
    ./build/latte make-model --preset tiny --seed 1 --out models/tiny
  fi
  model=models/tiny
fi

log=$(mktemp)
# Port 0: any free port (the log names it), so a busy 8000 cannot stop the quickstart.
./build/latte serve --model "$model" --served-model-name latte --port 0 2>"$log" &
pid=$!
cleanup() {
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

port=""
for _ in $(seq 1 1200); do  # up to 2 minutes to load the model
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$log" >&2
    echo "quickstart: latte serve did not start" >&2
    exit 1
  fi
  sleep 0.1
done
url="http://127.0.0.1:$port"
echo "latte serve is up at $url with $model"

# The default model answers gsm8k-style arithmetic questions (tasks/arith/).
# (The working is done column by column, so an answer takes up to ~100 tokens.)
completion='{"model": "latte", "prompt": "Question: Tom has 25 apples. He buys 17 more apples. How many apples does Tom have now?\nAnswer:", "max_tokens": 128, "temperature": 0, "stop": ["\n\n"]}'
chat='{"model": "latte", "messages": [{"role": "user", "content": "Question: Zoe has 9 books. She loses 4 of them. How many books does she have left?"}], "max_tokens": 128, "temperature": 0}'
run() {  # prints the curl command, then runs it and prints the answer
  echo
  echo "\$ curl -s $url$1 -H 'Content-Type: application/json' -d '$2'"
  reply=$(curl -sf "$url$1" -H 'Content-Type: application/json' -d "$2")
  echo "$reply"
}
# The trained default must get the sums right (25 + 17 = 42, 9 - 4 = 5).
expect() {
  if [ "$model" = models/default ] && ! grep -q "#### $1\b" <<<"$reply"; then
    echo "quickstart: $model answered without the expected #### $1" >&2
    exit 1
  fi
}
run /v1/completions "$completion"
expect 42
if grep -q '"chat_template"' "$model/tokenizer_config.json" 2>/dev/null; then
  run /v1/chat/completions "$chat"
  expect 5
else
  echo "($model has no chat template: the chat request is skipped)"
fi

kill -INT "$pid"
status=0
wait "$pid" || status=$?
trap 'rm -f "$log"' EXIT
if [ "$status" != 0 ]; then
  cat "$log" >&2
  echo "quickstart: latte serve exited with $status" >&2
  exit 1
fi
echo
echo "The server stopped cleanly. To keep one up:"
echo "  ./build/latte serve --model $model --served-model-name latte --port 8000"
echo "and try it with:"
echo "  curl -s http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' -d '$completion'"
