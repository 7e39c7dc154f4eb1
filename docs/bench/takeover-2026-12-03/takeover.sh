#!/usr/bin/env bash
# takeover.sh RTT KEEP GONE BSECS ASECS CC -> per-0.1s rates of the kept flow set (A) after B's streams end
RTT=$1 KEEP=$2 GONE=$3 BSECS=$4 ASECS=$5 CC=$6
T=/work/main/target/release/tcptune
N=tk$$
$T emu up $N --rtt $RTT --rate 1gbit --sysctl "net.ipv4.tcp_rmem=4096 131072 268435456" --sysctl "net.ipv4.tcp_wmem=4096 16384 268435456" >/dev/null 2>&1
$T emu exec $N b -- iperf3 -s -p 5201 -1 >/dev/null 2>&1 &
$T emu exec $N b -- iperf3 -s -p 5202 -1 >/dev/null 2>&1 &
sleep 0.5
$T emu exec $N a -- iperf3 -c 198.19.0.1 -p 5201 -P $KEEP -t $ASECS -i 0.1 -C $CC -J > /tmp/fx/tkA.json 2>/dev/null &
A=$!
$T emu exec $N a -- iperf3 -c 198.19.0.1 -p 5202 -P $GONE -t $BSECS -i 0.1 -C $CC -J > /tmp/fx/tkB.json 2>/dev/null &
wait $A; wait
$T emu down $N >/dev/null 2>&1
python3 - $BSECS <<'PY'
import json, sys
b = float(sys.argv[1])
a = json.load(open('/tmp/fx/tkA.json'))['intervals']
r = [(i['sum']['end'], i['sum']['bits_per_second'] / 1e6) for i in a]
before = [x for t, x in r if b - 1 < t <= b]
after = [(t, x) for t, x in r if t > b]
print("A before B ends: %.0f Mbit/s" % (sum(before) / max(len(before), 1)))
for thr in (0.5, 0.7, 0.9):
    hit = next((t - b for t, x in after if x >= thr * 965), None)
    print("  %.0f%% of 965 Mbit/s %s after B ended" % (thr * 100, "%.1f s" % hit if hit is not None else "never"))
print("  rates after: " + " ".join("%.0f" % x for _, x in after[:40:2]))
PY
