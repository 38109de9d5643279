#!/usr/bin/env bash
# Fails when a tracked .h/.cc file differs from what clang-format makes of it (the committed
# .clang-format: Google style, 100 columns), naming each file. Fix with:
#   git ls-files '*.h' '*.cc' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format not found (apt install clang-format)" >&2
  exit 1
fi
count=$(git ls-files '*.h' '*.cc' | wc -l)
bad=$(git ls-files -z '*.h' '*.cc' | xargs -0 -n 40 -P 2 clang-format --style=file --dry-run 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
if [ -n "$bad" ]; then
  echo "check_format: files not clang-formatted (fix: git ls-files '*.h' '*.cc' | xargs clang-format -i):" >&2
  sed 's/^/  /' <<<"$bad" >&2
  exit 1
fi
echo "check_format: $count files clang-formatted ($(clang-format --version | grep -o 'version [0-9.]*'))"
