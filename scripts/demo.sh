#!/usr/bin/env bash
# The main job on a generated sample logdir: install and build; generate a
# logdir with PyTorch and Keras runs and profiler traces; mount it; migrate
# the traces to the cold store; show the footprint before and after; verify
# every scalar curve through the mount; read a cold trace back and compare
# its hash with the original; unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
tbfs=./build/tools/tbfs
demo=${TBFS_DEMO_DIR:-/tmp/tbfs-demo}
mnt=$demo/mnt
fusermount3 -u "$mnt" 2>/dev/null || true
rm -rf "$demo"
mkdir -p "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; }
trap cleanup EXIT

echo "== generate a logdir"
$tbfs gen "$demo/logdir" --runs 4 --steps 3000 --trace-mb 512 --seed 1
$tbfs verify "$demo/logdir" --save-baseline "$demo/baseline.json" | tail -n 1
trace=$(cd "$demo/logdir" && find . -name '*.pt.trace.json' | sort | head -n 1)
original=$(sha256sum < "$demo/logdir/$trace" | cut -d' ' -f1)
before=$(du -sb "$demo/logdir" | cut -f1)

echo "== footprint before"
$tbfs scan "$demo/logdir" --top 5

echo "== mount, migrate through the mount"
$tbfs mount "$demo/logdir" "$mnt" --cold-after 0 --no-migrate
$tbfs migrate "$mnt" --now
$tbfs status "$mnt"
after=$(du -sb "$demo/logdir" | cut -f1)
echo "footprint: $before bytes before, $after bytes after (store included):" \
  "$(( 100 - 100 * after / before ))% smaller"

echo "== scalars through the mount, against the baseline taken before"
$tbfs verify "$mnt" --baseline "$demo/baseline.json" | tail -n 1

echo "== a cold trace read back through the mount"
state=$(getfattr --only-values -n user.tbfs.state "$mnt/$trace")
readback=$(sha256sum < "$mnt/$trace" | cut -d' ' -f1)
echo "$trace: $state; sha256 $readback"
[[ "$readback" == "$original" ]] && echo "identical to the original" || { echo "MISMATCH"; exit 1; }

fusermount3 -u "$mnt"
trap - EXIT
echo "== unmounted"
