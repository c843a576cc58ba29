#!/bin/sh
# Fails when a tracked C++ file differs from what clang-format (the repo's
# .clang-format) makes of it, naming each file. `scripts/format_check.sh --fix`
# rewrites them in place instead.
set -eu
cd "$(dirname "$0")/.."
FORMAT=${CLANG_FORMAT:-clang-format}
files=$(git ls-files '*.cc' '*.h' '*.cpp' '*.hpp')
if [ "${1:-}" = "--fix" ]; then
  # shellcheck disable=SC2086  # one word per file
  $FORMAT -i $files
  exit 0
fi
# One clang-format process for the whole tree; its diagnostics start with
# "FILE:LINE:COL: error:", from which the files at fault are named.
# shellcheck disable=SC2086  # one word per file
bad=$($FORMAT --dry-run -Werror $files 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error:.*/\1/p' | sort -u)
if [ -n "$bad" ]; then
  echo "format_check: not clang-formatted (run scripts/format_check.sh --fix):"
  echo "$bad" | sed 's/^/  /'
  exit 1
fi
echo "format_check: $(echo "$files" | wc -l) files clang-formatted"
