#!/bin/bash
# usage: pair.sh RTTms N MODE  -> iperf3 -P N first (12 s), tcptune send MODE joins at 3 s (6 s)
# SS=1: also `ss -tinm` of side a every 0.5 s while the send runs, into OUT.ss.txt
# (how docs/bench/beside-queue-2026-12-07 saw what bound the latecomer's streams).
set -u
B=${BIN:-target/release/tcptune}
RTT=$1; N=$2; MODE=$3; OUT=${4:-/tmp/pair}
NAME=fx$$
$B emu up $NAME --rtt ${RTT}ms --rate 1gbit >/dev/null 2>&1 || { echo emu up failed; exit 1; }
trap "$B emu down $NAME >/dev/null 2>&1; kill %1 %2 2>/dev/null" EXIT
ip netns exec tt-$NAME-b iperf3 -s >/dev/null 2>&1 &
ip netns exec tt-$NAME-b $B serve --no-path-db >/dev/null 2>&1 &
sleep 1
ip netns exec tt-$NAME-a iperf3 -c 198.19.0.1 -P $N -t 12 -J > $OUT.iperf.json &
IP=$!
sleep 3
if [ "${SS:-0}" = 1 ]; then
  ( for _ in $(seq 1 16); do echo "== $(date +%s.%N)"; ip netns exec tt-$NAME-a ss -tinm dst 198.19.0.1; sleep 0.5; done ) > $OUT.ss.txt 2>&1 &
fi
ip netns exec tt-$NAME-a $B send 198.19.0.1 -P $N -t 6 --tune $MODE --json --samples --no-path-db > $OUT.send.json 2>$OUT.send.err
wait $IP
python3 - $OUT <<'PY'
import json,sys
o=sys.argv[1]
i=json.load(open(o+'.iperf.json')); s=json.load(open(o+'.send.json'))
ir=[x['sum']['bits_per_second']/1e6 for x in i['intervals']]
sr=[x['sum']['bits_per_second']/1e6 for x in s['intervals']]
print('iperf3', ' '.join(f'{x:.0f}' for x in ir))
print('send  ', ' '.join(f'{x:.0f}' for x in sr))
a=sum(ir[5:9])/4; b=sum(sr[2:6])/4
print(f'jain {(a+b)**2/(2*(a*a+b*b)):.3f} inc {a:.0f} late {b:.0f}')
PY
