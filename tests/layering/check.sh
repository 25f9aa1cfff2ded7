#!/bin/sh
# A library sees its own layer's headers and those below, never one above:
# a store source that includes store, events and base headers builds; one
# that includes an fs header does not, for want of the header.
# Usage: check.sh BUILD_DIR
set -u
build=$1
if ! out=$(cmake --build "$build" --target tbfs_layer_store_includes_store 2>&1); then
  echo "a store source including its own and lower layers did not build:"
  echo "$out"
  exit 1
fi
if out=$(cmake --build "$build" --target tbfs_layer_store_includes_fs 2>&1); then
  echo "a store source including an fs header built"
  exit 1
fi
echo "$out" | grep -q "fs/filesystem.h: No such file" || { echo "$out"; exit 1; }
echo "ok: store cannot include fs/filesystem.h"
