#!/usr/bin/env bash
# The main job on an embedded default: build, make the tiny random model if absent,
# and generate from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [ ! -f models/tiny/config.json ]; then
  ./build/latte make-model --preset tiny --seed 1 --out models/tiny
fi
./build/latte generate --model models/tiny --prompt-ids 1,2,3,4,5 --max-tokens 16
