#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test. Pass SANITIZE=1 for an
# AddressSanitizer + UBSan build (in build-asan/); it skips the r1-shaped models
# (LATTE_SMALL_TESTS=1), which take most of an hour in a Debug build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/check-layering.sh
# The third-party references the tests compare against, at the lockfile's versions.
(cd tests/npm && npm ci --no-audit --no-fund --loglevel=error)
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
