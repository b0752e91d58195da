#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test. Pass SANITIZE=1 for an
# AddressSanitizer + UBSan build (in build-asan/); it skips the r1-shaped models
# (LATTE_SMALL_TESTS=1), which take most of an hour in a Debug build.
# After the suite: the model tests again on the portable kernels (LATTE_ISA=portable,
# small models; Release build only) and, on a CPU with AVX512_BF16 or AVX512_VNNI, on
# plain AVX-512 (LATTE_ISA=avx512: the kernels of a CPU without them); then, where clang
# and its libFuzzer runtime are installed, each fuzzer for FUZZ_SECONDS (default 20; 0
# skips them): scripts/fuzz.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/check-layering.sh
bash scripts/check-format.sh
# The third-party references the tests compare against, at the lockfile's versions.
(cd tests/npm && npm ci --no-audit --no-fund --loglevel=error)
# llama.cpp itself (node-llama-cpp's prebuilt CPU build), the GGUF tests' oracle; its
# CUDA and Vulkan builds are optional dependencies, left out. Its postinstall script only
# checks for binaries (and fails under Debian's node 18, where the tests skip): not run.
(cd tests/llamacpp && npm ci --no-audit --no-fund --omit=optional --ignore-scripts --loglevel=error)
if [ "${SANITIZE:-0}" = 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLATTE_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$(nproc)"
  cd build-asan
  export LATTE_SMALL_TESTS=1
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)"
  cd build
fi
ctest --output-on-failure
if [ "${SANITIZE:-0}" != 1 ]; then
  # Every test that runs the model's forward pass, on the kernels a CPU without
  # AVX-512 gets (the r1-shaped models skipped): ~2 min of CPU.
  model_tests='^(Models/ModelModes|Model(Batch|Portable|Caches|LongContext|Errors)|Engine|TextGeneration)[./]'
  LATTE_ISA=portable LATTE_SMALL_TESTS=1 ctest --output-on-failure --timeout 600 -R "$model_tests"
  # The same, and the GGUF models, on the AVX-512 kernels of a CPU without BF16 and VNNI
  # (Skylake-SP), where this CPU has either: ~1 min.
  if grep -qw -e avx512_bf16 -e avx512_vnni /proc/cpuinfo; then
    LATTE_ISA=avx512 LATTE_SMALL_TESTS=1 ctest --output-on-failure --timeout 600 -R "$model_tests|^Gguf(Model|LlamaCpp)[.]"
  fi
fi
cd ..
if [ "${FUZZ_SECONDS:-20}" != 0 ]; then
  status=0
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}" || status=$?
  if [ "$status" = 2 ]; then
    echo "test.sh: the fuzzers did not run (no clang or no libFuzzer runtime; see above)" >&2
  elif [ "$status" != 0 ]; then
    exit "$status"
  fi
fi
