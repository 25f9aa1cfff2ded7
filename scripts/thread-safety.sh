#!/usr/bin/env bash
# Runs clang's thread-safety analysis (-Wthread-safety, and the lock order
# of TBFS_ACQUIRED_BEFORE/AFTER with -Wthread-safety-beta) over the sources
# whose shared state is annotated (base/thread_annotations.h): an access
# without its lock, or a lock not released, fails the check.
# Usage: scripts/thread-safety.sh CLANGXX BUILD_DIR
set -euo pipefail
clangxx=$1
build=$2
cd "$(dirname "$0")/.."
flags=(-std=c++20 -fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror=thread-safety
       -Werror=thread-safety-beta
       -DFUSE_USE_VERSION=312 -DTBFS_VERSION='"analysis"' -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DFMT_SHARED
       -I. -I"$build" -I"$build/store" -I"$build/events" -I/usr/include/rados $(pkg-config --cflags fuse3))
# Two files at a time (the machines have two cores): each is one compiler
# run, and most of its time is parsing headers. Clang 16 or later: librados's
# C++ headers do not parse with clang 14 in C++20 (an operator== made
# ambiguous by C++20's reversed candidates, which clang 16 resolves as
# P2468 says), so store/rados_*.cc are analysed too.
files=(base/*.cc store/*.cc fs/*.cc)
printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P "$(nproc)" "$clangxx" "${flags[@]}"
