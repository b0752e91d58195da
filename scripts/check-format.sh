#!/usr/bin/env bash
# Fails when a C++ file differs from what clang-format makes of it with the repository's
# .clang-format, and when clang-format is not installed (scripts/install-deps.sh installs
# Debian's clang-format). Fix a failure with: clang-format -i FILE...
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "check-format: clang-format is not installed (Debian: apt-get install clang-format," \
       "or bash scripts/install-deps.sh)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cc' 'tests/*.h' 'tests/*.cc' 'fuzz/*.cc' 'bench/*.cc')
clang-format --dry-run -Werror "${files[@]}"
echo "check-format: ${#files[@]} files formatted"
