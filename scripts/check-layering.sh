#!/usr/bin/env bash
# Fails when an #include in src/ points up the layering (docs/architecture.md):
#   base -> kernels, dist -> model -> engine -> server, bench -> cli, with text (base only)
#   beside them and engine above text; client (an HTTP/OpenAI client) on base and
#   text only; synth (random checkpoints) on model and text.
# A layer may include itself and the layers it names below.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [base]="base"
  [text]="base text"
  [kernels]="base kernels"
  [dist]="base dist"
  [model]="base kernels dist model"
  [engine]="base kernels dist model text engine"
  [server]="base kernels dist model text engine server"
  [bench]="base kernels dist model text engine bench"
  [client]="base text client"
  [synth]="base kernels dist model text synth"
  [cli]="base kernels dist model text engine server bench client synth cli"
)
status=0
for dir in src/*/; do
  layer=$(basename "$dir")
  if [[ -z ${allowed[$layer]+x} ]]; then
    echo "check-layering: src/$layer is not a known layer (add it to scripts/check-layering.sh)" >&2
    status=1
    continue
  fi
  while IFS=: read -r file line include; do
    target=${include%%/*}
    [[ " ${allowed[$layer]} " == *" $target "* ]] && continue
    echo "check-layering: $file:$line: $layer includes \"$include\" ($target is not below $layer)" >&2
    status=1
  done < <(grep -HnoE '^#include "[a-z_]+/[^"]+"' "$dir"*.h "$dir"*.cc 2>/dev/null |
           sed -E 's/#include "([^"]+)"/\1/')
done
[[ $status == 0 ]] && echo "check-layering: every include in src/ points down"
exit $status
