#!/usr/bin/env bash
# Is tcptune's emulator on time? (results: docs/bench/emu.md)
#
# 1. Idle path: ping RTT and TCP handshake time through `emu up --delay D` for each D,
#    medians of N samples, against the target 2*D within max(0.3 ms, 1%); plus the same
#    over a plain veth pair (what the host itself adds).
# 2. Under load: one iperf3 flow at 1 Gbit/s over 100 ms RTT (MTU 1500, GSO path):
#    link rate the emulator delivered and p50/p99/max lateness of packets, median of REPS.
#
# Usage: sudo bench/emu_accuracy.sh   (env: N=30 REPS=3 DELAYS="0ms 0.5ms 5ms 25ms 50ms 100ms"
#        LOAD_SECS=20 TCPTUNE=target/release/tcptune)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/emu_common.sh
need iperf3 ip ping python3
N=${N:-30}
DELAYS=${DELAYS:-"0ms 0.5ms 5ms 25ms 50ms 100ms"}
LOAD_SECS=${LOAD_SECS:-20}
NAME="acc$$"
cleanup() { "$TCPTUNE" emu down "$NAME" >/dev/null 2>&1 || true; veth_down; }
trap cleanup EXIT

# ping_ms EXEC... -> median ping RTT in ms (N pings 50 ms apart)
ping_ms() {
    "$@" ping -n -c "$N" -i 0.05 -W 2 198.19.0.1 2>/dev/null |
        sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' | median
}
# handshake_ms EXEC_A EXEC_B -> median TCP connect time in ms (N connects)
handshake_ms() {
    local a=$1 b=$2
    $b python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.19.0.1", 7001)); s.listen(4096); time.sleep(60)' >/dev/null 2>&1 &
    local srv=$!
    sleep 0.5
    $a python3 -c '
import socket, statistics, sys, time
ts = []
for _ in range(int(sys.argv[1])):
    c = socket.socket(); t = time.perf_counter(); c.connect(("198.19.0.1", 7001))
    ts.append((time.perf_counter() - t) * 1e3); c.close(); time.sleep(0.02)
print("%.3f" % statistics.median(ts))' "$N"
    kill "$srv" 2>/dev/null || true
}

echo "# emu accuracy $(date -u +%FT%TZ) $(uname -r) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# idle path: medians of $N samples; target 2*delay within max(0.3 ms, 1%)"
printf '%-8s %8s %9s %9s %9s %9s %7s %s\n' delay want_ms ping_ms ping_err hs_ms hs_err tol_ms within
veth_up 1500
vp=$(ping_ms ip netns exec "${VETH_NS[0]}")
vh=$(handshake_ms "ip netns exec ${VETH_NS[0]}" "ip netns exec ${VETH_NS[1]}")
veth_down
printf '%-8s %8s %9s %9s %9s %9s %7s %s\n' veth 0 "$vp" - "$vh" - - -
for d in $DELAYS; do
    "$TCPTUNE" emu up "$NAME" --delay "$d" >/dev/null 2>&1
    p=$(ping_ms "$TCPTUNE" emu exec "$NAME" a --)
    h=$(handshake_ms "$TCPTUNE emu exec $NAME a --" "$TCPTUNE emu exec $NAME b --")
    "$TCPTUNE" emu down "$NAME" >/dev/null
    python3 - "$d" "$p" "$h" <<'PY'
import sys
d, p, h = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
want = 2 * float(d[:-2])
tol = max(0.3, 0.01 * want)
ok = "yes" if abs(p - want) <= tol and abs(h - want) <= tol else "no"
print("%-8s %8.3f %9.3f %+9.3f %9.3f %+9.3f %7.3f %s" % (d, want, p, p - want, h, h - want, tol, ok))
PY
done

echo
echo "# under load: 1 iperf3 flow, 1gbit, rtt 100ms, mtu 1500, ${LOAD_SECS}s (counters after 8s)"
printf '%-4s %10s %8s %8s %8s %10s %6s\n' run link_mbit p50_us p99_us max_us goodput drops
for i in $(seq "$REPS"); do
    r=$(emu_iperf "$LOAD_SECS" 8 --rtt 100ms --rate 1gbit --mtu 1500)
    printf '%-4s %10s %8s %8s %8s %10s %6s\n' "$i" $r
done
