#!/usr/bin/env bash
# Configures and builds tbfs into ./build (Release with debug info), two jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2
# Installs the tbfs command (to /usr/local/bin) for mount -t fuse.tbfs and fstab.
cmake --install build >/dev/null
