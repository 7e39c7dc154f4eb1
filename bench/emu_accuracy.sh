#!/usr/bin/env bash
# Is tcptune's emulator on time? (results: docs/bench/emu_accuracy.md, generated)
#
# 1. Idle path: ping RTT and TCP handshake time through `emu up --delay D` for each D,
#    medians of N samples per repetition, against the target 2*D within max(0.3 ms, 1%);
#    plus the same over a plain veth pair (what the host itself adds).
# 2. Under load: one iperf3 flow (the host's default congestion control) at 1 Gbit/s over
#    100 ms RTT (MTU 1500, GSO path): the link rate the emulator delivered and the p50/p99/max
#    lateness of its packets, REPS runs; and one cubic flow on the same path for
#    CUBIC_SECS, counted after 15 s.
#
# Writes every repetition to bench/raw/emu_accuracy.tsv (RAW=), then docs/bench/emu_accuracy.md
# from it with bench/tables.
#
# Usage: sudo bench/emu_accuracy.sh   (env: N=30 REPS=3 DELAYS="0ms 0.5ms 5ms 25ms 50ms 100ms"
#        LOAD_SECS=20 CUBIC_SECS=30 TCPTUNE=target/release/tcptune RAW=bench/raw/emu_accuracy.tsv)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/emu_common.sh
need iperf3 ip ping python3
N=${N:-30}
DELAYS=${DELAYS:-"0ms 0.5ms 5ms 25ms 50ms 100ms"}
LOAD_SECS=${LOAD_SECS:-20}
CUBIC_SECS=${CUBIC_SECS:-30}
RAW=${RAW:-bench/raw/emu_accuracy.tsv}
NAME="acc$$"
rows=$(mktemp)
cleanup() { "$TCPTUNE" emu down "$NAME" >/dev/null 2>&1 || true; veth_down; rm -f "$rows"; }
trap cleanup EXIT
run_start

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
print("%.3f" % statistics.median(ts))' "$N" || echo nan
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
}
# row PART CASE TOOL REP WANT_MS MS LINK_MBIT P50_US P99_US MAX_US GOODPUT_MBIT DROPS
row() {
    tsv_line "$1" "$2" "$3" "$commit" "${OPTS:--}" "$4" "$5" "$6" "$7" "$8" "$9" "${10}" "${11}" \
        "${12}" "$(nan_exit "$6" "$7")" >>"$rows"
}

echo "# idle path: medians of $N samples per repetition; target 2*delay within max(0.3 ms, 1%)" >&2
for rep in $(seq "$REPS"); do
    veth_up 1500
    OPTS="veth, no emulator" row idle veth ping "$rep" 0 "$(ping_ms ip netns exec "${VETH_NS[0]}")" - - - - - -
    OPTS="veth, no emulator" row idle veth handshake "$rep" 0 \
        "$(handshake_ms "ip netns exec ${VETH_NS[0]}" "ip netns exec ${VETH_NS[1]}")" - - - - - -
    veth_down
    for d in $DELAYS; do
        want=$(python3 -c "print(2 * float('${d%ms}'))")
        "$TCPTUNE" emu up "$NAME" --delay "$d" >/dev/null 2>&1
        OPTS="emu up --delay $d" row idle "$d" ping "$rep" "$want" "$(ping_ms "$TCPTUNE" emu exec "$NAME" a --)" - - - - - -
        OPTS="emu up --delay $d" row idle "$d" handshake "$rep" "$want" \
            "$(handshake_ms "$TCPTUNE emu exec $NAME a --" "$TCPTUNE emu exec $NAME b --")" - - - - - -
        "$TCPTUNE" emu down "$NAME" >/dev/null
    done
    echo "idle repetition $rep of $REPS done" >&2
done

cc=$(sysctl -n net.ipv4.tcp_congestion_control)
for rep in $(seq "$REPS"); do
    read -r link p50 p99 mx good drops < <(emu_iperf "$LOAD_SECS" 8 --rtt 100ms --rate 1gbit --mtu 1500)
    OPTS="emu run --rtt 100ms --rate 1gbit --mtu 1500 --warmup 8s; iperf3 -t $LOAD_SECS ($cc)" \
        row load "1gbit-100ms-1500" iperf3 "$rep" - - "$link" "$p50" "$p99" "$mx" "$good" "$drops"
    echo "load run $rep of $REPS: link $link Mbit/s, p99 lateness $p99 us" >&2
    # The same path with one cubic flow, longer, counted after its slow start.
    read -r link p50 p99 mx good drops < <(IPERF_ARGS="-C cubic" emu_iperf "$CUBIC_SECS" 15 --rtt 100ms --rate 1gbit --mtu 1500)
    OPTS="emu run --rtt 100ms --rate 1gbit --mtu 1500 --warmup 15s; iperf3 -C cubic -t $CUBIC_SECS" \
        row load "1gbit-100ms-1500-cubic" iperf3 "$rep" - - "$link" "$p50" "$p99" "$mx" "$good" "$drops"
    echo "cubic run $rep of $REPS: link $link Mbit/s, p99 lateness $p99 us" >&2
done

{
    echo "# command: sudo N=$N REPS=$REPS LOAD_SECS=$LOAD_SECS CUBIC_SECS=$CUBIC_SECS bench/emu_accuracy.sh"
    run_meta
    echo "# congestion: $cc"
    echo "# load_secs: $LOAD_SECS"
    echo "# cubic_secs: $CUBIC_SECS"
    echo "# samples: $N"
    printf 'part\tcase\ttool\tcommit\toptions\trep\twant_ms\tms\tlink_mbit\tp50_us\tp99_us\tmax_us\tgoodput_mbit\tdrops\texit\n'
    cat "$rows"
} >"$RAW"
echo "wrote $RAW" >&2
python3 bench/tables >/dev/null && echo "wrote docs/bench/emu_accuracy.md (bench/tables)" >&2
