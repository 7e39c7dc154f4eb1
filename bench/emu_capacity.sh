#!/usr/bin/env bash
# How fast can tcptune's emulator go and stay accurate? (results: docs/bench/emu.md)
#
# 1. Accurate rate: a single iperf3 flow over --rtt $RTT at each rate, MTU 1500 and 9000;
#    the link rate the emulator delivered (its own counters, after a warm-up) and the
#    lateness of packets against their due time. A rate counts as held when the median
#    link rate is within 5% of it and the median p99 lateness is under 1 ms.
# 2. Raw forwarding: no rate limit, no delay, emulator (with and without GSO offload)
#    against a plain veth pair between two namespaces, same run.
#
# Usage: sudo bench/emu_capacity.sh   (env: REPS=3 SECS=8 WARM=3 RTT=20ms MTUS="1500 9000"
#        RATES="1gbit 2gbit 2.5gbit 3gbit 4gbit 5gbit 6gbit" TCPTUNE=target/release/tcptune
#        EXTRA="--no-offload" to measure the plain TUN path, RAW=0 to skip part 2)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/emu_common.sh
need iperf3 ip python3
SECS=${SECS:-8}; WARM=${WARM:-3}; RTT=${RTT:-20ms}
MTUS=${MTUS:-"1500 9000"}
RATES=${RATES:-"1gbit 2gbit 2.5gbit 3gbit 4gbit 5gbit 6gbit"}
EXTRA=${EXTRA:-}
RAW=${RAW:-1}
trap veth_down EXIT

echo "# emu capacity $(date -u +%FT%TZ) $(uname -r) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# single iperf3 flow, rtt $RTT, ${SECS}s (counters after ${WARM}s), median of $REPS ${EXTRA:+(emu $EXTRA)}"
printf '%-5s %-8s %10s %7s %8s %8s %8s %10s %s\n' mtu rate link_mbit ratio p50_us p99_us max_us goodput held
for mtu in $MTUS; do
    for rate in $RATES; do
        runs=$(for _ in $(seq "$REPS"); do emu_iperf "$SECS" "$WARM" --rtt "$RTT" --rate "$rate" --mtu "$mtu" $EXTRA; done)
        col() { echo "$runs" | awk -v c="$1" '{print $c}' | median; }
        link=$(col 1) p50=$(col 2) p99=$(col 3) mx=$(col 4) good=$(col 5)
        want=$(python3 -c "import sys; s=sys.argv[1]; u={'k':1e3,'m':1e6,'g':1e9}[s[-4]]; print(float(s[:-4])*u/1e6)" "$rate")
        ratio=$(python3 -c "print('%.3f' % ($link / $want))" 2>/dev/null || echo nan)
        held=$(python3 -c "print('yes' if $ratio >= 0.95 and $p99 < 1000 else 'no')" 2>/dev/null || echo no)
        printf '%-5s %-8s %10s %7s %8s %8s %8s %10s %s\n' "$mtu" "$rate" "$link" "$ratio" "$p50" "$p99" "$mx" "$good" "$held"
    done
done

[ "$RAW" = 1 ] || exit 0
echo
echo "# raw forwarding: no rate, no delay, ${SECS}s iperf3 goodput in Mbit/s, median of $REPS"
printf '%-5s %12s %12s %12s %10s\n' mtu veth emu_gso emu_plain gso/veth
for mtu in $MTUS; do
    veth_up "$mtu"
    v=$(for _ in $(seq "$REPS"); do veth_iperf "$SECS"; done | median)
    veth_down
    g=$(for _ in $(seq "$REPS"); do emu_iperf "$SECS" 1 --mtu "$mtu"; done | awk '{print $5}' | median)
    p=$(for _ in $(seq "$REPS"); do emu_iperf "$SECS" 1 --mtu "$mtu" --no-offload; done | awk '{print $5}' | median)
    printf '%-5s %12s %12s %12s %10s\n' "$mtu" "$v" "$g" "$p" "$(python3 -c "print('%.2f' % ($g / $v))" 2>/dev/null || echo nan)"
done
