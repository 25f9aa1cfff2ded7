#!/usr/bin/env bash
# Compression ratios of the traces in a logdir with the zstd command line,
# per trace class, beside the real Kineto trace of ../shared/data.
#   tools/bench/trace-ratios.sh [LOGDIR]
# Without LOGDIR, generates one (4 runs, 512 MiB of traces) in /tmp.
set -euo pipefail
cd "$(dirname "$0")/../.."
logdir=${1:-}
if [[ -z "$logdir" ]]; then
  logdir=/tmp/tbfs-bench-traces
  rm -rf "$logdir"
  ./build/tools/tbfs gen "$logdir" --runs 4 --steps 1000 --trace-mb 512 --seed 1 >/dev/null
fi

ratio() {  # files... -> "bytes z3 z19"
  local bytes z3 z19
  bytes=$(cat "$@" | wc -c)
  z3=$(cat "$@" | zstd -3 -T2 -c | wc -c)
  z19=$(cat "$@" | zstd -19 -T2 -c | wc -c)
  awk -v b="$bytes" -v a="$z3" -v c="$z19" \
    'BEGIN { printf "%10.1f MB   zstd -3: %5.1fx   zstd -19: %5.1fx\n", b/1e6, b/a, b/c }'
}

printf '%-34s' "pytorch *.pt.trace.json"
mapfile -t f < <(find "$logdir" -name '*.pt.trace.json' | sort); ratio "${f[@]}"
printf '%-34s' "tensorflow *.xplane.pb"
mapfile -t f < <(find "$logdir" -name '*.xplane.pb' | sort); ratio "${f[@]}"
printf '%-34s' "already gzip'd *.json.gz"
mapfile -t f < <(find "$logdir" -name '*.json.gz' | sort); ratio "${f[@]}"
printf '%-34s' "all traces"
mapfile -t f < <(find "$logdir" -type f ! -name '*tfevents*' | sort); ratio "${f[@]}"
real=../shared/data/kineto-resnet50/worker0.1623143089861.pt.trace.json.gz
if [[ -f "$real" ]]; then
  tmp=$(mktemp); zcat "$real" > "$tmp"
  printf '%-34s' "real Kineto trace (shared/data)"; ratio "$tmp"
  rm -f "$tmp"
fi
