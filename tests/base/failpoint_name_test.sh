#!/bin/sh
# A failpoint's name is checked as the code compiles: a known one compiles,
# a misspelt one does not, and the compiler says why.
# Usage: failpoint_name_test.sh CXX SOURCE_DIR
set -u
cxx=$1
src=$2
compile() {
  "$cxx" -std=c++20 -fsyntax-only -DTBFS_FAILPOINTS -I"$src" "-DPOINT=\"$1\"" \
    "$src/tests/base/failpoint_name.cc" 2>&1
}
compile migrate.unlinked || { echo "a known failpoint did not compile"; exit 1; }
if out=$(compile migrate.unlinkd); then
  echo "a misspelt failpoint compiled"
  exit 1
fi
echo "$out" | grep -q "not a failpoint" || { echo "$out"; exit 1; }
echo "ok: migrate.unlinkd refused"
