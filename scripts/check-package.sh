#!/usr/bin/env bash
# Builds the .deb with scripts/package.sh in BUILD_DIR/release (a Release
# build: no failpoints), runs lintian on it, checks what it holds, installs
# it, checks the installed tbfs, its manual page, its bash completion and its
# systemd unit (systemd-analyze verify), then removes it again. Run as root
# (ctest runs it as Packaging.DebBuildsInstallsAndRuns).
set -euo pipefail
build=${1:?usage: check-package.sh BUILD_DIR}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "check-package: $*" >&2; exit 1; }

deb=$(bash "$source_dir/scripts/package.sh" "$build/release")
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/release/CMakeCache.txt")
# Debian's own checks, pedantic ones included: no error, no warning.
if ! out=$(lintian --pedantic --fail-on error,warning "$deb" 2>&1); then
  fail "lintian --pedantic $deb: $out"
fi
[[ -z $out ]] || echo "check-package: lintian's remarks (neither error nor warning): $out" >&2

contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/tbfs ./usr/share/man/man1/tbfs.1.gz ./usr/lib/systemd/system/tbfs@.service \
         ./usr/lib/systemd/system/tbfs-exporter.service \
         ./usr/share/bash-completion/completions/tbfs ./usr/share/doc/tbfs/examples/tbfs.yaml \
         ./usr/share/tbfs/tbfs-alerts.yml ./usr/share/doc/tbfs/changelog.gz \
         ./usr/share/doc/tbfs/copyright; do
  grep -q " $f\$" <<<"$contents" || fail "$deb lacks $f"
done
# The maintainer scripts: present, executable, valid sh.
scripts=$(mktemp -d)
dpkg-deb -e "$deb" "$scripts"
for s in postinst prerm postrm; do
  [[ -x $scripts/$s ]] || fail "$deb has no executable $s"
  sh -n "$scripts/$s" || fail "$deb: $s is not valid sh"
done
rm -rf "$scripts"
# Its changelog names this version (bump packaging/changelog with project()).
head=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/tbfs/changelog.gz | zcat | head -1)
[[ $head == "tbfs ($version) "* ]] || fail "packaging/changelog starts with '$head', not tbfs ($version)"
# No test hook ships: no failpoint's name or variable is in the binary.
hooks=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/tbfs | strings |
        grep -E 'TBFS_FAIL|TBFS_PAUSE|migrate\.(unlinked|copied|verify)|failpoint' | head -3 || true)
[[ -z $hooks ]] || fail "the packaged tbfs holds test hooks: $hooks"
depends=$(dpkg-deb -f "$deb" Depends)
for d in fuse3 libfuse3-3 libzstd1 libprotobuf libsystemd0 libjemalloc2; do
  grep -q "$d" <<<"$depends" || fail "$deb does not depend on $d: $depends"
done

if dpkg-query -W -f='${Status}' tbfs 2>/dev/null | grep -q "install ok installed"; then
  fail "a tbfs package is installed already; not replacing it"
fi
trap 'dpkg -P tbfs >/dev/null 2>&1 || true' EXIT
dpkg -i "$deb" >/dev/null
[[ $(/usr/bin/tbfs --version) == "tbfs $version" ]] || fail "/usr/bin/tbfs --version: $(/usr/bin/tbfs --version)"
man -aw tbfs | grep -q '^/usr/share/man/man1/tbfs.1.gz$' || fail "man -aw tbfs: $(man -aw tbfs 2>&1)"
systemd-analyze verify /usr/lib/systemd/system/tbfs@.service /usr/lib/systemd/system/tbfs-exporter.service
# The unit is the one SystemdService.* runs (its ExecStart, sandbox and
# notifications), and the alert rules load as Prometheus would.
cmp -s /usr/lib/systemd/system/tbfs@.service "$source_dir/packaging/tbfs@.service" ||
  fail "the installed unit differs from packaging/tbfs@.service"
promtool check rules /usr/share/tbfs/tbfs-alerts.yml >/dev/null ||
  fail "promtool check rules /usr/share/tbfs/tbfs-alerts.yml: $(promtool check rules /usr/share/tbfs/tbfs-alerts.yml 2>&1)"
# The completion offers the commands, then a command's options.
words=$(bash -c 'source /usr/share/bash-completion/completions/tbfs
  COMP_WORDS=(tbfs sal); COMP_CWORD=1; _tbfs; echo "${COMPREPLY[*]}"
  COMP_WORDS=(tbfs salvage --t); COMP_CWORD=2; _tbfs; echo "${COMPREPLY[*]}"')
[[ $words == $'salvage\n--to' ]] || fail "bash completion gave: $words"
# Mount options after a comma complete the one being typed.
words=$(bash -c 'source /usr/share/bash-completion/completions/tbfs
  COMP_WORDS=(tbfs mount -o allow_other,cold); COMP_CWORD=3; _tbfs; echo "${COMPREPLY[*]}"')
[[ $words == "allow_other,cold_after=" ]] || fail "bash completion after a comma gave: $words"
# The installed unit's command, as systemd runs it (Type=notify), with a
# notification socket of this script's: READY=1 only once the mount
# serves, STOPPING=1 and exit 0 on SIGTERM (systemctl stop).
work=$(mktemp -d)
trap 'fusermount3 -u -z "$work/mnt" 2>/dev/null || true; rm -rf "$work"; dpkg -P tbfs >/dev/null 2>&1 || true' EXIT
mkdir "$work/mnt"
/usr/bin/tbfs gen "$work/logdir" --runs 1 --steps 20 --trace-mb 1 >/dev/null
printf 'logdir: %s\nmount:\n  mountpoint: %s\n  migrate: false\n' "$work/logdir" "$work/mnt" >"$work/run.yaml"
exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/tbfs@.service)
probe=$(cd "$work/logdir" && find . -name '*tfevents*' | head -1)
# shellcheck disable=SC2086  # ExecStart's words, as systemd splits them
perl -MSocket -MIO::Socket::UNIX -MIO::Select -e '
  my ($path, $probe, @cmd) = @ARGV;
  my $s = IO::Socket::UNIX->new(Type => SOCK_DGRAM(), Local => $path) or die "socket: $!\n";
  my $sel = IO::Select->new($s);
  my $pid = fork;
  if ($pid == 0) { $ENV{NOTIFY_SOCKET} = $path; exec @cmd; exit 127 }
  $sel->can_read(60) or die "no READY=1 within 60 s\n";
  $s->recv(my $msg, 4096);
  $msg =~ /READY=1/ or die "the first notification is not READY=1: $msg\n";
  -e $probe or die "READY=1 came before the mount served $probe\n";
  kill "TERM", $pid;
  $sel->can_read(30) or die "no STOPPING=1 within 30 s of SIGTERM\n";
  $s->recv($msg, 4096);
  $msg =~ /STOPPING=1/ or die "after SIGTERM: $msg\n";
  waitpid($pid, 0);
  $? == 0 or die "the unit'"'"'s command exited with status $? on SIGTERM\n";
' "$work/notify" "$work/mnt/$probe" ${exec_start//\/etc\/tbfs\/%i.yaml/$work/run.yaml} ||
  fail "the unit's command under Type=notify"
! grep -q " $work/mnt " /proc/mounts || fail "SIGTERM left $work/mnt mounted"

# Purged, it leaves nothing of its own behind.
dpkg -P tbfs >/dev/null
for f in /usr/bin/tbfs /usr/share/tbfs /usr/share/doc/tbfs /usr/lib/systemd/system/tbfs@.service \
         /usr/lib/systemd/system/tbfs-exporter.service /usr/share/man/man1/tbfs.1.gz \
         /usr/share/bash-completion/completions/tbfs; do
  [[ ! -e $f ]] || fail "dpkg -P tbfs left $f"
done
echo "check-package: $deb holds, installs, runs and purges tbfs $version"
