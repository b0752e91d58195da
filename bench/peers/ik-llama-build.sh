#!/usr/bin/env bash
# Build the ik_llama.cpp tools that bench/vs-ik runs (CPU only), after the one local patch
# that a small V2-Lite-shaped GGUF needs.
#
#   bench/peers/ik-llama-build.sh IK_SRC_DIR BUILD_DIR [JOBS]
#     IK_SRC_DIR  an extracted ik_llama.cpp source tree (see bench/README.md, "ik_llama.cpp")
#     BUILD_DIR   where to build; llama-bench, llama-batched-bench, llama-sweep-bench and
#                 llama-quantize end up in BUILD_DIR/bin
#     JOBS        parallel compile jobs (default 2); about 15 minutes on 2 cores
#
# The patch: ik_llama.cpp decides "V2-Lite" (no q_lora, plain q_proj) from the layer count
# (26 or 27) when it loads tensors and builds the graph, so a 4-layer V2-Lite-shaped model
# fails to load with "missing tensor blk.0.attn_q_a_norm". The GGUF carries q_lora_rank = 0
# (../shared/peers/llamacpp/convert_wrapper.py writes it), so the patch also takes
# n_lora_q == 0 as V2-Lite. It changes which tensors are loaded, never a computation.
set -euo pipefail
if [ $# -lt 2 ]; then sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; fi
src=$1 build=$2 jobs=${3:-2}

patch_is_lite() {  # file: 'is_lite = (hparams.n_layer == 27 || hparams.n_layer == 26)' -> '... || hparams.n_lora_q == 0'
  local file=$src/$1
  grep -q 'hparams.n_layer == 26) || hparams.n_lora_q == 0' "$file" && return 0
  grep -q 'is_lite = (hparams.n_layer == 27 || hparams.n_layer == 26);' "$file" ||
    { echo "ik-llama-build: $file has no is_lite line to patch (another ik_llama.cpp version?)" >&2; exit 1; }
  sed -i 's/is_lite = (hparams.n_layer == 27 || hparams.n_layer == 26);/is_lite = (hparams.n_layer == 27 || hparams.n_layer == 26) || hparams.n_lora_q == 0;/' "$file"
}
patch_is_lite src/llama-load-tensors.cpp
patch_is_lite src/graphs/build_deepseek2.cpp

cmake -S "$src" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_IQK_FA_ALL_QUANTS=OFF
cmake --build "$build" -j "$jobs" --target llama-bench llama-batched-bench llama-sweep-bench llama-quantize
ls -l "$build"/bin/llama-bench "$build"/bin/llama-batched-bench "$build"/bin/llama-sweep-bench "$build"/bin/llama-quantize
