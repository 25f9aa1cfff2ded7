#!/usr/bin/env bash
# Configures and builds tbfs into ./build (RelWithDebInfo, with the
# test-only failpoints), two jobs. Installs nothing unless asked:
#
#   build.sh             build only
#   build.sh --install   and put the tbfs binary in /usr/local/bin (what
#                        `mount -t fuse.tbfs`, fstab and the mount tests
#                        run), nothing else: the unit, manual page and
#                        completion come with the package (scripts/package.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
install=false
case ${1:-} in
  "") ;;
  --install) install=true ;;
  *) echo "usage: build.sh [--install]" >&2; exit 2 ;;
esac
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2
if $install; then
  install -m 0755 build/tools/tbfs /usr/local/bin/tbfs
  # Earlier versions of this script ran `cmake --install build`, which put
  # the package's unit, manual page, completion and examples in /usr/local,
  # where they shadow the package's: gone.
  rm -f /usr/local/lib/systemd/system/tbfs@.service /usr/local/share/man/man1/tbfs.1.gz \
    /usr/local/share/bash-completion/completions/tbfs
  rm -rf /usr/local/share/doc/tbfs
fi
