#!/usr/bin/env bash
# Rewrites the library's own includes to the installed form: `#include "core/tensor.h"` becomes
# `#include "mixgrad/core/tensor.h"` (and "mixgrad.h" becomes "mixgrad/mixgrad.h") in every file
# of the library layers and in mixgrad.h, so installed headers find each other under
# <prefix>/include/mixgrad/ without the user adding that folder to their include path.
# Tests, examples, benchmarks and tools keep unprefixed includes (the source root is on their
# include path). Idempotent: run it again after merging branches that add unprefixed includes.
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERS=(core autograd ops cuda nn optim data io amp distributed)
files=()
for layer in "${LAYERS[@]}"; do
  [ -d "$layer" ] || continue
  while IFS= read -r -d '' f; do files+=("$f"); done < <(
    find "$layer" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \
                             -o -name '*.def' \) -print0)
done
files+=(mixgrad.h)
alt="$(IFS='|'; echo "${LAYERS[*]}")"
sed -i -E \
  -e "s@^([[:space:]]*#[[:space:]]*include[[:space:]]+\")(($alt)/)@\\1mixgrad/\\2@" \
  -e "s@^([[:space:]]*#[[:space:]]*include[[:space:]]+\")mixgrad\\.h\"@\\1mixgrad/mixgrad.h\"@" \
  "${files[@]}"
left=$(grep -lE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"(($alt)/|mixgrad\\.h\")" "${files[@]}" || true)
if [ -n "$left" ]; then
  echo "prefix_includes: unprefixed includes left in: $left" >&2
  exit 1
fi
echo "prefix_includes: ${#files[@]} files checked, $(git diff --name-only -- "${files[@]}" | wc -l) changed"
