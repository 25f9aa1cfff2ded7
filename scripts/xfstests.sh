#!/usr/bin/env bash
# Runs xfstests (fstests) through a tbfs mount, or through libfuse's
# passthrough_hp as the anchor, and compares the failures with the list
# tbfs expects (tests/xfstests/expected-failures).
#
#   XFSTESTS_SRC=DIR bash scripts/xfstests.sh [--anchor FUSE3_SRC] [TEST...]
#
# Nothing is fetched at run time. XFSTESTS_SRC is a checkout of xfstests at
# the commit this script was last run with:
#
#   git clone https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git
#   git -C xfstests-dev checkout 63a29724a85f1999e49bf0a9bf0d22643b6116e5
#
# (the GitHub mirror kdave/xfstests has the same commit). The script installs
# the Debian packages xfstests needs, builds it in place (make), and runs,
# as root:
#   - a 4 GiB ext4 filesystem (BACKING_FS=xfs: XFS) in a loop file under
#     WORK (default /var/tmp/tbfs-xfstests), never the host's root: the logdirs behind
#     the test and scratch mounts live there, so a test that fills its
#     filesystem fills only that one;
#   - xfstests with FSTYP=fuse and FUSE_SUBTYP=.tbfs: it mounts with
#     `mount -t fuse.tbfs LOGDIR MOUNTPOINT -o allow_other`, through
#     mount.fuse3 and the installed tbfs (scripts/build.sh --install);
#   - with no TEST given, the generic quick group, less the tests of
#     tests/xfstests/exclude (each with its reason).
# Then it prints the failures, those expected (tests/xfstests/expected-failures,
# each with its reason) and those that are not, and exits 1 when one is not.
# --anchor FUSE3_SRC runs the same tests through libfuse 3.14.0's
# example/passthrough_hp instead, for comparison. FUSE3_SRC is Debian's
# source of the libfuse3-dev installed here (no download at run time):
#
#   curl -O http://deb.debian.org/debian/pool/main/f/fuse3/fuse3_3.14.0.orig.tar.xz
#   tar xf fuse3_3.14.0.orig.tar.xz      # FUSE3_SRC=$PWD/fuse-3.14.0
#
# The script builds it against libfuse3-dev with one change: its fixed
# mount options ("default_permissions,fsname=hpps") come from the mount
# helper instead, as default_permissions,allow_other,fsname=SOURCE, so that
# other users reach it (as tbfs's allow_other) and xfstests tells the test
# and scratch mounts apart by their source.
# xfstests needs the users fsgqa and 123456-fsgqa and the group fsgqa: the
# script adds them when they are missing.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
src=${XFSTESTS_SRC:?set XFSTESTS_SRC to an xfstests checkout (see the top of this script)}
work=${WORK:-/var/tmp/tbfs-xfstests}
backing_fs=${BACKING_FS:-ext4}
anchor=""
if [[ ${1:-} == --anchor ]]; then
  anchor_src=${2:?--anchor needs the libfuse 3.14.0 source folder}
  anchor=$work/passthrough_hp
  shift 2
fi
fail() { echo "xfstests.sh: $*" >&2; exit 2; }
[[ $(id -u) == 0 ]] || fail "run as root (xfstests mounts and unmounts)"
[[ -f $src/check ]] || fail "$src is not an xfstests checkout (no ./check)"
if [[ -n $anchor ]]; then
  hp=$anchor_src/example/passthrough_hp.cc
  [[ -f $hp ]] || fail "$anchor_src is no libfuse source (no example/passthrough_hp.cc)"
  grep -q '"default_permissions,fsname=hpps"' "$hp" || fail "$hp: not libfuse 3.14's passthrough_hp"
  mkdir -p "$work"
  sed 's/"default_permissions,fsname=hpps"/getenv("PASSTHROUGH_HP_OPTIONS")/' "$hp" \
    > "$work/passthrough_hp.cc"
  g++ -O2 -std=c++17 -I"$anchor_src/example" -o "$anchor" "$work/passthrough_hp.cc" \
    $(pkg-config fuse3 --cflags --libs) -lpthread
fi
[[ -n $anchor ]] || command -v tbfs >/dev/null || fail "no tbfs in PATH: bash scripts/build.sh --install"

export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends xfslibs-dev uuid-dev uuid-runtime libtool-bin \
  automake autoconf libacl1-dev libattr1-dev libaio-dev xfsprogs e2fsprogs libgdbm-dev gawk \
  libcap-dev liburing-dev bc psmisc fio quota sqlite3 libssl-dev acl attr fuse3 >/dev/null
[[ -x $src/ltp/fsx ]] || make -C "$src" -j"$(nproc)" >/dev/null
getent group fsgqa >/dev/null || groupadd fsgqa
for u in fsgqa 123456-fsgqa; do
  id "$u" >/dev/null 2>&1 || useradd -m -g fsgqa "$u"
  # su warns on stderr without a home, and a test's output then differs.
  home=$(getent passwd "$u" | cut -d: -f6)
  [[ -d $home ]] || { mkdir -p "$home" && chown "$u:fsgqa" "$home"; }
done

# The loop filesystem, made afresh each run.
mkdir -p "$work"
backing=$work/backing test_mnt=$work/test scratch_mnt=$work/scratch
for m in "$test_mnt" "$scratch_mnt" "$backing"; do
  mountpoint -q "$m" && umount "$m"
done
rm -f "$work/loop.img"
truncate -s 4G "$work/loop.img"
case $backing_fs in
  ext4) mkfs.ext4 -q -F "$work/loop.img" ;;
  xfs) mkfs.xfs -q -f "$work/loop.img" ;;
  *) fail "BACKING_FS=$backing_fs: ext4 or xfs" ;;
esac
mkdir -p "$backing" "$test_mnt" "$scratch_mnt"
mount -o loop "$work/loop.img" "$backing"
cleanup() {
  for m in "$test_mnt" "$scratch_mnt"; do
    mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
  done
  mountpoint -q "$backing" && umount "$backing"
  return 0
}
trap cleanup EXIT
mkdir -p "$backing/test" "$backing/scratch"

# xfstests finds its mounts by their source (findmnt -S TEST_DEV) and
# unmounts them by it (umount TEST_DEV), so a device must be the source the
# mount shows, and no folder's path (umount takes a folder for a mount
# point): tbfs shows tbfs:LOGDIR and mounts it; passthrough_hp is given
# hp:FOLDER, which its helper mounts with that as its fsname.
if [[ -n $anchor ]]; then
  # mount -t fuse.passthrough_hp SOURCE MNT -o OPTS runs this helper.
  cat > /sbin/mount.fuse.passthrough_hp <<EOF
#!/bin/sh
# It takes no -o: the options xfstests gives are those set here.
export PASSTHROUGH_HP_OPTIONS="default_permissions,allow_other,fsname=\$1"
exec $anchor "\${1#hp:}" "\$2"
EOF
  chmod 755 /sbin/mount.fuse.passthrough_hp
  subtype=.passthrough_hp prefix="hp:"
else
  subtype=.tbfs prefix="tbfs:"
fi
# xfstests checks that the test mount's type, as df -T prints it, is FSTYP
# (fuse), and has no FSTYP for a FUSE subtype: tbfs mounts as fuse.tbfs
# (as mount(8) and findmnt show it), so its df prints the type as fuse.
cat > "$work/df" <<'EOF'
#!/bin/sh
df "$@" | sed 's/ fuse\.tbfs / fuse /'
EOF
chmod 755 "$work/df"
cat > "$src/local.config" <<EOF
export DF_PROG="$work/df -T -P"
export FSTYP=fuse
export FUSE_SUBTYP=$subtype
export TEST_DEV=$prefix$backing/test
export TEST_DIR=$test_mnt
export SCRATCH_DEV=$prefix$backing/scratch
export SCRATCH_MNT=$scratch_mnt
export FUSE_MOUNT_OPTIONS="-oallow_other"
export TEST_FS_MOUNT_OPTS="-oallow_other"
export MOUNT_OPTIONS="-oallow_other"
EOF

tests=("$@")
args=()
if [[ ${#tests[@]} -eq 0 ]]; then
  args=(-g quick -E "$source_dir/tests/xfstests/exclude")
  tests=()
fi
start=$(date +%s)
cd "$src"
./check "${args[@]}" "${tests[@]}" 2>&1 | tee "$work/check.out" || true
echo "xfstests.sh: $(( $(date +%s) - start )) s"
grep -q '^Ran: ' "$work/check.out" || fail "xfstests ran no test (see above)"

# Failures: the check's "Failures:" lines; expected ones name the test
# first on their line in tests/xfstests/expected-failures.
failed=$(sed -n 's/^Failures: //p' "$work/check.out" | tr ' ' '\n' | sed '/^$/d' | sort -u)
expected=$(sed 's/#.*//' "$source_dir/tests/xfstests/expected-failures" | awk 'NF {print $1}' | sort -u)
unexpected=$(comm -23 <(echo "$failed") <(echo "$expected") | sed '/^$/d')
passed=$(sed -n 's/^Passed all \([0-9]*\) tests.*/\1/p; s/^Ran: //p' "$work/check.out" | head -1)
echo "xfstests.sh: failed: $(echo "$failed" | sed '/^$/d' | wc -l) ($(echo $failed))"
if [[ -n $unexpected && -z $anchor ]]; then
  echo "xfstests.sh: NOT EXPECTED: $(echo $unexpected)"
  exit 1
fi
echo "xfstests.sh: no failure beyond tests/xfstests/expected-failures"
