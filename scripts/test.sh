#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test. Pass SANITIZE=1 for an
# AddressSanitizer + UBSan build (in build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if [ "${SANITIZE:-0}" = 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLATTE_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$(nproc)"
  cd build-asan
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)"
  cd build
fi
ctest --output-on-failure -V
