#!/usr/bin/env bash
# The emulator's rootless mode against its root mode, on the same paths in one run
# (results: docs/BENCHMARKS.md). Every measurement alternates the two modes, repetition by
# repetition (the order flips each time), so that the load of a shared machine falls on both:
#
# 1. Capacity: a single iperf3 flow (cubic) at each rate over --rtt $RTT, MTU 1500: the link
#    rate the emulator delivered (its own counters, after a warm-up) and the p99 lateness of
#    packets; and raw forwarding (no rate, no delay): iperf3 goodput.
# 2. Accuracy: TCP handshake time through an idle path at each one-way delay (median of N
#    connects), against the target 2 x delay.
#
# Root mode runs as root; rootless mode runs as an unprivileged user (uid $ROOTLESS_UID, via
# setpriv), as a user would: it has no real-time priority for the emulator threads.
# Prints medians per mode and rootless / root, and writes every run to
# bench/raw/emu_rootless.tsv (RAW=), then docs/bench/emu-rootless.md from it with bench/tables.
#
# Usage: sudo bench/emu_rootless.sh   (env: REPS=5 SECS=8 WARM=3 RTT=20ms N=30
#        RATES="1gbit 2gbit 4gbit" DELAYS="0.5ms 25ms 100ms" ROOTLESS_UID=65534
#        TCPTUNE=target/release/tcptune RAW=bench/raw/emu_rootless.tsv)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/emu_common.sh
need iperf3 ip python3 setpriv
REPS=${REPS:-5}; SECS=${SECS:-8}; WARM=${WARM:-3}; RTT=${RTT:-20ms}; N=${N:-30}
RATES=${RATES:-"1gbit 2gbit 4gbit"}
DELAYS=${DELAYS:-"0.5ms 25ms 100ms"}
ROOTLESS_UID=${ROOTLESS_UID:-65534}
IPERF_ARGS=${IPERF_ARGS:-"-C cubic"}
RAW=${RAW:-bench/raw/emu_rootless.tsv}
TCPTUNE=$(realpath "$TCPTUNE")
SCRATCH=$(mktemp -d /tmp/tcptune-bench-rootless.XXXXXX)
chown "$ROOTLESS_UID:$ROOTLESS_UID" "$SCRATCH"
rows=$(mktemp)
trap 'rm -rf "$SCRATCH" "$rows"' EXIT
run_start
# row PART CASE MODE REP OPTIONS WANT_MS MS LINK_MBIT P50_US P99_US MAX_US GOODPUT_MBIT
row() {
    tsv_line "$1" "$2" "$3" "$commit" "$5" "$4" "$6" "$7" "$8" "$9" "${10}" "${11}" "${12}" \
        "$(nan_exit "$7" "$8" "$9" "${12}")" >>"$rows"
}
USER_PREFIX=(setpriv --reuid="$ROOTLESS_UID" --regid="$ROOTLESS_UID" --clear-groups
             env HOME="$SCRATCH" TMPDIR="$SCRATCH" PATH="$PATH")

# as MODE CMD...: run CMD in root mode (as root) or rootless mode (as the user)
as() {
    local mode=$1; shift
    if [ "$mode" = root ]; then TCPTUNE_EMU_MODE=root "$@"; else "${USER_PREFIX[@]}" "$@"; fi
}
# the two modes in the order of repetition $1 (alternating)
order() { if [ $(( $1 % 2 )) -eq 1 ]; then echo "root rootless"; else echo "rootless root"; fi; }

# capacity MODE ARGS... -> "link_mbit p50_us p99_us max_us goodput_mbit drops"
capacity() {
    local mode=$1; shift
    if [ "$mode" = root ]; then
        EMU_AS=(env TCPTUNE_EMU_MODE=root); EMU_TMP=
    else
        EMU_AS=("${USER_PREFIX[@]}"); EMU_TMP=$SCRATCH
    fi
    emu_iperf "$SECS" "$WARM" "$@"
}

# handshake MODE DELAY -> median TCP connect time in ms over an idle path
handshake() {
    local mode=$1 d=$2
    as "$mode" "$TCPTUNE" emu run --delay "$d" \
        --server 'python3 -c "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"198.19.0.1\", 7001)); s.listen(4096); time.sleep(120)"' \
        -- python3 -c '
import socket, statistics, sys, time
time.sleep(0.3)
ts = []
for _ in range(int(sys.argv[1])):
    c = socket.socket(); t = time.perf_counter(); c.connect(("198.19.0.1", 7001))
    ts.append((time.perf_counter() - t) * 1e3); c.close(); time.sleep(0.02)
print("%.3f" % statistics.median(ts))' "$N" 2>/dev/null || echo nan
}

ratio() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print('%.3f' % (b / a) if a > 0 else 'nan')" "$1" "$2" 2>/dev/null || echo nan; }

echo "# emu rootless vs root $(date -u +%FT%TZ) $(uname -r) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# rootless as uid $ROOTLESS_UID; $(as rootless "$TCPTUNE" emu run -- true 2>&1 | sed -n 's/^tcptune emu: mode //p' | cut -c1-60)..."
echo "# capacity: single iperf3 flow ($IPERF_ARGS), rtt $RTT, MTU 1500, ${SECS}s (counters after ${WARM}s); medians of $REPS, modes alternating"
printf '%-8s %-9s %10s %8s %8s %10s\n' rate mode link_mbit p50_us p99_us goodput
declare -A LINK
for rate in $RATES; do
    declare -A runs=([root]="" [rootless]="")
    for rep in $(seq "$REPS"); do
        for mode in $(order "$rep"); do
            out=$(capacity "$mode" --rtt "$RTT" --rate "$rate")
            runs[$mode]+="$out"$'\n'
            read -r link p50 p99 mx good _ <<<"$out"
            row capacity "$rate" "$mode" "$rep" "emu run --rtt $RTT --rate $rate --mtu 1500 --warmup ${WARM}s; iperf3 $IPERF_ARGS -t $SECS" \
                - - "$link" "$p50" "$p99" "$mx" "$good"
        done
    done
    for mode in root rootless; do
        col() { echo "${runs[$mode]}" | grep . | awk -v c="$1" '{print $c}' | median; }
        LINK[$rate,$mode]=$(col 1)
        printf '%-8s %-9s %10s %8s %8s %10s\n' "$rate" "$mode" "$(col 1)" "$(col 2)" "$(col 3)" "$(col 5)"
    done
    printf '%-8s %-9s %10s\n' "$rate" "ratio" "$(ratio "${LINK[$rate,root]}" "${LINK[$rate,rootless]}")"
done

echo
echo "# raw forwarding: no rate, no delay, ${SECS}s iperf3 goodput in Mbit/s; medians of $REPS, modes alternating"
declare -A raw=([root]="" [rootless]="")
for rep in $(seq "$REPS"); do
    for mode in $(order "$rep"); do
        good=$(capacity "$mode" | awk '{print $5}')
        raw[$mode]+="$good"$'\n'
        row raw none "$mode" "$rep" "emu run --warmup ${WARM}s (no rate, no delay); iperf3 $IPERF_ARGS -t $SECS" \
            - - - - - - "$good"
    done
done
r=$(echo "${raw[root]}" | grep . | median); u=$(echo "${raw[rootless]}" | grep . | median)
printf '%-10s %10s %10s %8s\n' "" root rootless ratio
printf '%-10s %10s %10s %8s\n' goodput "$r" "$u" "$(ratio "$r" "$u")"
echo "#   root runs: $(echo ${raw[root]})"
echo "#   rootless runs: $(echo ${raw[rootless]})"

echo
echo "# accuracy: idle TCP handshake time, median of $N connects per run, medians of $REPS runs"
printf '%-8s %8s %9s %9s %9s %9s\n' delay want_ms root_ms rootless_ms root_err rootless_err
for d in $DELAYS; do
    declare -A hs=([root]="" [rootless]="")
    for rep in $(seq "$REPS"); do
        for mode in $(order "$rep"); do
            ms=$(handshake "$mode" "$d")
            hs[$mode]+="$ms"$'\n'
            row handshake "$d" "$mode" "$rep" "emu run --delay $d; median of $N connects" \
                "$(python3 -c "print(2 * float('${d%ms}'))")" "$ms" - - - - -
        done
    done
    r=$(echo "${hs[root]}" | grep . | median); u=$(echo "${hs[rootless]}" | grep . | median)
    python3 - "$d" "$r" "$u" <<'PY'
import sys
d, r, u = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
want = 2 * float(d[:-2])
print("%-8s %8.3f %9.3f %9.3f %+9.3f %+9.3f" % (d, want, r, u, r - want, u - want))
PY
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
{
    echo "# command: sudo REPS=$REPS SECS=$SECS WARM=$WARM RTT=$RTT N=$N bench/emu_rootless.sh"
    run_meta
    echo "# rootless: uid $ROOTLESS_UID (setpriv), a user namespace of tcptune's own (veth pairs and packet sockets), no real-time priority; root: named namespaces and TUN devices; the modes alternate run by run"
    echo "# capacity: one iperf3 flow ($IPERF_ARGS), rtt $RTT, MTU 1500, ${SECS}s, the emulator's counters after ${WARM}s"
    echo "# samples: $N"
    printf 'part\tcase\ttool\tcommit\toptions\trep\twant_ms\tms\tlink_mbit\tp50_us\tp99_us\tmax_us\tgoodput_mbit\texit\n'
    cat "$rows"
} >"$RAW"
echo "wrote $RAW" >&2
python3 bench/tables >/dev/null && echo "wrote docs/bench/emu-rootless.md (bench/tables)" >&2
