#!/usr/bin/env bash
# Runs clang-tidy with the repository's .clang-tidy over every source file in src/ (or
# the files given) and fails on any finding. Needs clang-tidy (Debian: clang-tidy).
# About 15 CPU-minutes for the whole tree; not part of scripts/test.sh.
#   bash scripts/tidy.sh [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tidy -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
files=("$@")
((${#files[@]})) || mapfile -t files < <(git ls-files 'src/*.cc')
# GCC's `#pragma GCC push_options/target` is unknown to clang; the code needs it for GCC.
extra=(--extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-unknown-pragmas)
failed=0
for f in "${files[@]}"; do
  clang-tidy -p build-tidy --quiet "${extra[@]}" "$f" || failed=1
done
exit "$failed"
