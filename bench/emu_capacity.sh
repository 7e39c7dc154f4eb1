#!/usr/bin/env bash
# How fast can tcptune's emulator go and stay accurate? (results: docs/bench/emu_capacity.md,
# generated)
#
# 1. Accurate rate: a single iperf3 flow over --rtt $RTT at each rate, MTU 1500 and 9000;
#    the link rate the emulator delivered (its own counters, after a warm-up) and the
#    lateness of packets against their due time. A rate counts as held when the median
#    link rate is within 5% of it and the median p99 lateness is under 1 ms.
# 2. Raw forwarding: no rate limit, no delay, emulator (with and without GSO offload)
#    against a plain veth pair between two namespaces, same run.
#
# Writes every run to bench/raw/emu_capacity.tsv (OUT=), then docs/bench/emu_capacity.md from
# it with bench/tables.
#
# Usage: sudo bench/emu_capacity.sh   (env: REPS=3 SECS=8 WARM=3 RTT=20ms MTUS="1500 9000"
#        RATES="1gbit 2gbit 2.5gbit 3gbit 4gbit 5gbit 6gbit" TCPTUNE=target/release/tcptune
#        EXTRA="--no-offload" to measure the plain TUN path, RAW=0 to skip part 2,
#        OUT=bench/raw/emu_capacity.tsv)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/emu_common.sh
need iperf3 ip python3
SECS=${SECS:-8}; WARM=${WARM:-3}; RTT=${RTT:-20ms}
MTUS=${MTUS:-"1500 9000"}
RATES=${RATES:-"1gbit 2gbit 2.5gbit 3gbit 4gbit 5gbit 6gbit"}
EXTRA=${EXTRA:-}
RAW=${RAW:-1}
OUT=${OUT:-bench/raw/emu_capacity.tsv}
rows=$(mktemp)
trap 'veth_down; rm -f "$rows"' EXIT
run_start
# row PART CASE TOOL OPTIONS REP MTU RATE LINK_MBIT P50_US P99_US MAX_US GOODPUT_MBIT
# (the CPU steal since the last `mark` goes with it)
row() {
    local exit=0
    case "$8${12}" in *nan*) exit=1 ;; esac
    # shellcheck disable=SC2086
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$commit" \
        "$4" "$5" "$6" "$7" "$8" "$9" "${10}" "${11}" "${12}" "$(steal_pct $mark)" "$exit" >>"$rows"
}

echo "# single iperf3 flow, rtt $RTT, ${SECS}s (counters after ${WARM}s), $REPS runs ${EXTRA:+(emu $EXTRA)}" >&2
tool=emu_gso
[ -z "$EXTRA" ] || tool=emu_plain
for mtu in $MTUS; do
    for rate in $RATES; do
        for rep in $(seq "$REPS"); do
            mark=$(steal_mark)
            read -r link p50 p99 mx good _ < <(emu_iperf "$SECS" "$WARM" --rtt "$RTT" --rate "$rate" --mtu "$mtu" $EXTRA)
            row rate "$mtu/$rate" "$tool" "emu run --rtt $RTT --rate $rate --mtu $mtu --warmup ${WARM}s $EXTRA; iperf3 -t $SECS" \
                "$rep" "$mtu" "$rate" "$link" "$p50" "$p99" "$mx" "$good"
        done
        echo "MTU $mtu, $rate: done" >&2
    done
done

if [ "$RAW" = 1 ]; then
    echo "# raw forwarding: no rate, no delay, ${SECS}s iperf3 goodput, $REPS runs" >&2
    for mtu in $MTUS; do
        for rep in $(seq "$REPS"); do
            mark=$(steal_mark)
            veth_up "$mtu"
            v=$(veth_iperf "$SECS")
            veth_down
            row raw "$mtu" veth "veth pair, iperf3 -t $SECS" "$rep" "$mtu" - - - - - "$v"
            mark=$(steal_mark)
            read -r _ _ _ _ g _ < <(emu_iperf "$SECS" 1 --mtu "$mtu")
            row raw "$mtu" emu_gso "emu run --mtu $mtu; iperf3 -t $SECS" "$rep" "$mtu" - - - - - "$g"
            mark=$(steal_mark)
            read -r _ _ _ _ p _ < <(emu_iperf "$SECS" 1 --mtu "$mtu" --no-offload)
            row raw "$mtu" emu_plain "emu run --mtu $mtu --no-offload; iperf3 -t $SECS" "$rep" "$mtu" - - - - - "$p"
        done
        echo "raw forwarding, MTU $mtu: done" >&2
    done
fi

{
    echo "# command: sudo REPS=$REPS SECS=$SECS WARM=$WARM RTT=$RTT RATES=\"$RATES\"${EXTRA:+ EXTRA=\"$EXTRA\"} bench/emu_capacity.sh"
    run_meta
    echo "# congestion: $(sysctl -n net.ipv4.tcp_congestion_control)"
    echo "# rtt: $RTT"
    echo "# secs: $SECS"
    printf 'part\tcase\ttool\tcommit\toptions\trep\tmtu\trate\tlink_mbit\tp50_us\tp99_us\tmax_us\tgoodput_mbit\tsteal_pct\texit\n'
    cat "$rows"
} >"$OUT"
echo "wrote $OUT" >&2
python3 bench/tables >/dev/null && echo "wrote docs/bench/emu_capacity.md (bench/tables)" >&2
