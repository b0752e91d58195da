#!/usr/bin/env bash
# Fails when a C++ file differs from what clang-format makes of it with the repository's
# .clang-format. Skips with a note when clang-format is not installed (Debian: clang-format).
# Fix a failure with: clang-format -i FILE...
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "check-format: clang-format is not installed; skipped" >&2
  exit 0
fi
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cc' 'tests/*.h' 'tests/*.cc' 'fuzz/*.cc' 'bench/*.cc')
clang-format --dry-run -Werror "${files[@]}"
echo "check-format: ${#files[@]} files formatted"
