#!/usr/bin/env bash
# A throwaway Ceph cluster for tests: one monitor and one OSD (memstore, in
# memory) on 127.0.0.1, no systemd, no manager, no authentication; the
# RADOS store's tests run against it.
#
#   ceph-cluster.sh start DIR [POOL]  starts it in DIR (made; must not hold a
#                                     running cluster), creates POOL (default
#                                     tbfs), waits until an object can be
#                                     written and read back, prints the path
#                                     of its ceph.conf
#   ceph-cluster.sh stop DIR          stops its daemons and removes DIR
#   ceph-cluster.sh pause DIR         stops the OSD with SIGSTOP (every one of
#                                     its processes) and waits until the
#                                     kernel says each is stopped
#   ceph-cluster.sh resume DIR [POOL] resumes an OSD paused with SIGSTOP and
#                                     waits until it serves again
#   ceph-cluster.sh start-if-installed DIR [POOL]
#                                     as start, but when Ceph is not
#                                     installed writes the reason to
#                                     DIR/unavailable and exits 0 (ctest's
#                                     fixture: the RADOS tests then skip)
#
# Needs ceph-mon, ceph-osd and ceph-common (Debian 12: Ceph 16.2). Exit 2
# with one line when they are missing or the cluster does not come up in
# 60 s (its logs stay in DIR for a look; stop removes them).
set -euo pipefail
usage() { echo "usage: ceph-cluster.sh start DIR [POOL] | stop DIR | pause DIR | resume DIR [POOL]" >&2; exit 2; }
fail() { echo "ceph-cluster: $*" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd=$1 dir=$2 pool=${3:-tbfs}

# The OSD's processes: the one its pid file names, and every ceph-osd
# started with this cluster's ceph.conf (one that respawned runs under
# another pid than the one a test read at the start).
osd_pids() {
  local conf p cmd
  [[ -d $dir ]] || return 0
  conf=$(cd "$dir" && pwd)/ceph.conf
  {
    cat "$dir/run/osd.0.pid" 2>/dev/null || true
    echo
    for p in /proc/[0-9]*; do
      cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
      if [[ $cmd == "ceph-osd -c $conf "* ]]; then echo "${p#/proc/}"; fi
    done
  } | { grep -E '^[0-9]+$' || true; } | sort -u
}

# Its data is in memory and thrown away: the daemons are killed outright.
stop() {
  local pidfile pid pids
  pids=$(osd_pids)
  for pidfile in "$dir"/run/*.pid; do
    [[ -e $pidfile ]] || continue
    pids+=" $(cat "$pidfile")"
  done
  for pid in $pids; do
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$dir"
}

# A test's "unreachable store": the OSD stopped, for sure. A stop that did
# not take once let a test read every cold file while it expected EIO
# (its pid file named no process that served).
pause() {
  local pids pid state
  pids=$(osd_pids)
  [[ -n $pids ]] || fail "no OSD process of the cluster in $dir"
  for pid in $pids; do kill -STOP "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    state=gone
    for _ in $(seq 200); do
      state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || { state=gone; break; }
      [[ $state == T ]] && break
      sleep 0.01
    done
    [[ $state == T || $state == gone ]] || fail "OSD process $pid in $dir did not stop (state $state)"
  done
}

# Up when an object goes in and comes back (60 s at most).
serving() {
  for _ in $(seq 120); do
    if echo ready | timeout 5 rados -c "$1" -p "$pool" put ceph-cluster-probe - 2>/dev/null &&
       [[ $(timeout 5 rados -c "$1" -p "$pool" get ceph-cluster-probe - 2>/dev/null) == ready ]]; then
      timeout 5 rados -c "$1" -p "$pool" rm ceph-cluster-probe
      return 0
    fi
    sleep 0.5
  done
  return 1
}

# An OSD paused longer than its read lease (16 s by default) can come back
# with its placement groups "laggy" and hold every request it queued: with
# one OSD nothing starts a new interval. Marking it down does (it says it
# was wrongly marked down and boots again); the clients resend.
resume() {
  local pid
  for pid in $(osd_pids); do kill -CONT "$pid" 2>/dev/null || true; done
  timeout 30 ceph -c "$dir/ceph.conf" osd down 0 >/dev/null 2>&1 || true
  serving "$dir/ceph.conf" || fail "the cluster in $dir did not serve again within 60 s (see $dir/log)"
}

case $cmd in
  stop) stop; exit 0 ;;
  pause) pause; exit 0 ;;
  resume) resume; exit 0 ;;
  start|start-if-installed) ;;
  *) usage ;;
esac

for tool in ceph-mon ceph-osd ceph monmaptool rados uuidgen; do
  if ! command -v "$tool" >/dev/null; then
    why="$tool is missing (apt-get install ceph-mon ceph-osd ceph-common)"
    if [[ $cmd == start-if-installed ]]; then
      rm -rf "$dir" && mkdir -p "$dir" && echo "$why" >"$dir/unavailable"
      echo "ceph-cluster: $why; the RADOS tests will be skipped" >&2
      exit 0
    fi
    fail "$why"
  fi
done
rm -f "$dir/unavailable"
[[ -e $dir/run/mon.a.pid ]] && fail "$dir holds a cluster already (ceph-cluster.sh stop $dir)"
mkdir -p "$dir"/{mon,osd,run,log}
dir=$(cd "$dir" && pwd)
# A free port for the monitor (the kernel picks; nothing else binds it in
# the instant before the monitor does, or start fails and says so).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fsid=$(uuidgen)
conf=$dir/ceph.conf
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
mon allow pool delete = true
mon warn on pool no redundancy = false
run dir = $dir/run
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
mon data = $dir/mon/\$name
osd data = $dir/osd/\$name
osd objectstore = memstore
memstore device bytes = 2147483648
osd max object name len = 256
osd max object namespace len = 64
EOF

monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >/dev/null 2>&1 || fail "ceph-mon --mkfs failed (see $dir/log)"
ceph-mon -c "$conf" -i a || fail "ceph-mon did not start (see $dir/log)"
osd_uuid=$(uuidgen)
osd_id=$(timeout 60 ceph -c "$conf" osd new "$osd_uuid" 2>/dev/null) || fail "the monitor does not answer (see $dir/log)"
mkdir -p "$dir/osd/osd.$osd_id"
ceph-osd -c "$conf" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >/dev/null 2>&1 || fail "ceph-osd --mkfs failed (see $dir/log)"
ceph-osd -c "$conf" -i "$osd_id" >/dev/null 2>&1 || fail "ceph-osd did not start (see $dir/log)"
timeout 60 ceph -c "$conf" osd pool create "$pool" 8 >/dev/null 2>&1 || fail "cannot create pool $pool"
timeout 60 ceph -c "$conf" osd pool application enable "$pool" tbfs >/dev/null 2>&1 || true
serving "$conf" && { echo "$conf"; exit 0; }
fail "the cluster in $dir did not take a write within 60 s (see $dir/log)"
