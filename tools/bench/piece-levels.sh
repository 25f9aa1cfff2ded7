#!/usr/bin/env bash
# What zstd's level buys a file cut into the store's 1 MiB pieces, against
# the whole file at -19, with the zstd command line (no dictionary):
#   tools/bench/piece-levels.sh FILE [MIB] [LEVEL...]
# The first MIB MiB of FILE (default 32); levels default to 9 12 16 17 19.
# Prints each level's bytes, its ratio to the whole file's -19, and its time.
set -euo pipefail
file=${1:?usage: piece-levels.sh FILE [MIB] [LEVEL...]}
mib=${2:-32}
shift $(($# < 2 ? $# : 2))
levels=("$@")
[[ ${#levels[@]} -gt 0 ]] || levels=(9 12 16 17 19)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c $((mib << 20)) "$file" >"$work/head"
whole=$(zstd -q -19 -T2 -c "$work/head" | wc -c)
(cd "$work" && split -b 1M head piece.)
echo "$mib MiB of $file, whole at -19: $whole bytes"
for l in "${levels[@]}"; do
  start=$(date +%s.%N)
  total=0
  for p in "$work"/piece.*; do total=$((total + $(zstd -q "-$l" -c "$p" | wc -c))); done
  end=$(date +%s.%N)
  awk -v l="$l" -v t="$total" -v w="$whole" -v s="$start" -v e="$end" \
    'BEGIN { printf "1 MiB pieces at level %2d: %9d bytes, %.2fx the whole at -19, %.2f s\n", l, t, t/w, e-s }'
done
