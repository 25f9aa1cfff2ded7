#!/usr/bin/env bash
# Builds tbfs with sanitizers and runs the tests under them:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/): every
#         test except the package build, the static thread-safety check and
#         the fstab test (it mounts the installed tbfs, not this build);
#   tsan  ThreadSanitizer (build-tsan/): the mount tests and the unit tests
#         of the concurrent parts (inode table, chunk buffers and cache,
#         work pool and alarm, dictionaries, a migration's copies on two threads),
#         with the suppressions of scripts/tsan.supp.
# Usage: scripts/check.sh [asan|tsan]...   (no argument: both)
# A finding fails the check: in a test process at once, in a mount daemon
# or a tbfs command through the report it leaves in BUILD/sanitizer-logs,
# which is printed. Run as root (the mount tests need /dev/fuse). Builds and
# installs the plain build first (scripts/build.sh --install).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

run() {
  local kind=$1 sanitize ctest_args
  case $kind in
    asan) sanitize=address,undefined
          ctest_args=(-E '^(Packaging|ThreadSafety)\.|FstabForm') ;;
    tsan) sanitize=thread
          ctest_args=(-R '^(Mount|Mounted|Transitions|Confined|NoRoom|SharedStore|UnreachableStore|Listing|Races|UnmountOrSigterm|InodeTable|ChunkBuffers|ChunkCache|WorkPool|Alarm|ChunkWriter|DigestEach|TotalsTest|Dictionary|MigrateTest)' -E 'FstabForm') ;;
    *) echo "check.sh: unknown check '$kind' (asan or tsan)" >&2; return 2 ;;
  esac
  local build=$root/build-$kind logs=$root/build-$kind/sanitizer-logs
  echo "check.sh: $kind: building in $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTBFS_SANITIZE=$sanitize \
    -DTBFS_WERROR=ON >/dev/null
  # A build that fails must fail the check: tests would otherwise run the
  # binaries of an older build.
  if ! cmake --build "$build" -j2 >"$build/build.log" 2>&1; then
    grep -v '^\[' "$build/build.log" | tail -40 >&2
    echo "check.sh: $kind: the build failed" >&2
    return 1
  fi
  rm -rf "$logs" && mkdir -p "$logs"
  local common="log_path=$logs/report:print_stacktrace=1"
  export ASAN_OPTIONS="$common:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
  export UBSAN_OPTIONS="$common:halt_on_error=1"
  export TSAN_OPTIONS="$common:halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp"
  local status=0
  # TSan needs a layout of the address space that ASLR can break on some
  # kernels; setarch -R turns ASLR off for what it runs.
  local pre=()
  [[ $kind == tsan ]] && pre=(setarch "$(uname -m)" -R)
  (cd "$build" && "${pre[@]}" ctest --output-on-failure -j2 --timeout 900 "${ctest_args[@]}") || status=1
  if compgen -G "$logs/report*" >/dev/null; then
    echo "check.sh: $kind: sanitizer reports from tbfs processes:" >&2
    for f in "$logs"/report*; do echo "== $f" >&2; head -60 "$f" >&2; done
    status=1
  fi
  unset ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS
  echo "check.sh: $kind: $([[ $status == 0 ]] && echo passed || echo FAILED)"
  return $status
}

kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)
# The tests that mount or remount through mount(8) (-t fuse.tbfs) run the
# tbfs in /usr/local/bin as its helper, never a sanitized build: install
# this tree's, so that they test what is here (on a fresh machine there is
# none, and they fail with "tbfs: not found").
echo "check.sh: installing this tree's tbfs for the mount(8) helper (scripts/build.sh --install)"
bash scripts/build.sh --install >/dev/null
status=0
for k in "${kinds[@]}"; do run "$k" || status=1; done
exit $status
