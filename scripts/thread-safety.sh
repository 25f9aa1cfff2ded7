#!/usr/bin/env bash
# Runs clang's thread-safety analysis (-Wthread-safety) over the sources
# whose shared state is annotated (base/thread_annotations.h): an access
# without its lock, or a lock not released, fails the check.
# Usage: scripts/thread-safety.sh CLANGXX BUILD_DIR
set -euo pipefail
clangxx=$1
build=$2
cd "$(dirname "$0")/.."
flags=(-std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety
       -DFUSE_USE_VERSION=312 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DFMT_SHARED
       -I. -I"$build" -I"$build/store" -I"$build/events" $(pkg-config --cflags fuse3))
status=0
for f in base/*.cc fs/*.cc; do
  "$clangxx" "${flags[@]}" "$f" || status=1
done
exit $status
