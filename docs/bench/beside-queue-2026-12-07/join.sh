#!/usr/bin/env bash
# The diagnostic hand run of this folder: across `tcptune emu` at RTT ms / 1 Gbit/s, an
# `iperf3 -c PEER -P N -t 12` in side a, and 3 s later `tcptune send PEER -P N -t 6 --tune MODE
# --json --no-path-db` joins it; `ss -tinm` of side a every 0.5 s meanwhile. Writes
# OUTDIR/TAG/{iperf3.json,send.json,send.err,ss.txt} and prints both per-second rates and
# Jain's index over the settled window (as bench/fair_vs_iperf3.sh takes it).
# Usage: sudo [BIN=target/release/tcptune] [OUTDIR=/tmp/tt-join] join.sh RTT N MODE TAG
set -u
BIN=${BIN:-target/release/tcptune}
RTT=$1 N=$2 MODE=$3 TAG=$4
NAME=dg$$
A=tt-$NAME-a B=tt-$NAME-b PEER=198.19.0.1
OUT=${OUTDIR:-/tmp/tt-join}/$TAG; mkdir -p $OUT
$BIN emu up $NAME --rtt ${RTT}ms --rate 1gbit >/dev/null 2>$OUT/emu.err || { cat $OUT/emu.err; exit 1; }
trap '$BIN emu down $NAME >/dev/null 2>&1; kill $S1 $S2 2>/dev/null' EXIT
ip netns exec $B iperf3 -s >/dev/null 2>&1 & S1=$!
ip netns exec $B $BIN serve --no-path-db >/dev/null 2>$OUT/serve.err & S2=$!
sleep 1
ip netns exec $A iperf3 -c $PEER -P $N -t 12 -J > $OUT/iperf3.json 2>&1 & I=$!
sleep 3
( for i in $(seq 1 16); do echo "== $(date +%s.%N)"; ip netns exec $A ss -tinm dst $PEER; sleep 0.5; done ) > $OUT/ss.txt 2>&1 &
ip netns exec $A $BIN send $PEER -P $N -t 6 --tune $MODE --json --no-path-db > $OUT/send.json 2>$OUT/send.err
wait $I
python3 - $OUT <<'PY'
import json,sys
o=sys.argv[1]
i=json.load(open(o+"/iperf3.json")); s=json.load(open(o+"/send.json"))
ir=[iv["sum"]["bits_per_second"]/1e6 for iv in i["intervals"]]
sr=[iv["sum"]["bits_per_second"]/1e6 for iv in s["intervals"]]
print("iperf3:", " ".join(f"{x:.0f}" for x in ir))
print("send:  ", "      "*3+" ".join(f"{x:.0f}" for x in sr))
a=sum(ir[5:9])/4; b=sum(sr[2:6])/4
print(f"settled iperf3 {a:.0f} send {b:.0f} jain {(a+b)**2/(2*(a*a+b*b)):.3f}")
PY
