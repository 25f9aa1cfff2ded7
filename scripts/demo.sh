#!/usr/bin/env bash
# The main job on a generated sample logdir: install, build, generate a
# logdir with PyTorch and Keras runs and profiler traces, then show its
# footprint (tbfs scan) and prove its scalar curves intact (tbfs verify).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
demo=${TBFS_DEMO_DIR:-/tmp/tbfs-demo}
rm -rf "$demo"
./build/tools/tbfs gen "$demo/logdir" --runs 4 --steps 3000 --trace-mb 256 --seed 1
./build/tools/tbfs scan "$demo/logdir"
./build/tools/tbfs verify "$demo/logdir" --must-have loss/train,batch_loss \
  --save-baseline "$demo/baseline.json" | tail -n 3
./build/tools/tbfs verify "$demo/logdir" --baseline "$demo/baseline.json" | tail -n 1
