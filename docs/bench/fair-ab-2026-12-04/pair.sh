#!/usr/bin/env bash
# iperf3 -P 4 first, tcptune send -P 4 joins at 3 s; one run per binary given.
N=pr4; # usage: [RTT=25] [P=4] [EXTRA=send options] pair.sh BINARY...
RTT=${RTT:-25}; P=${P:-4}
NEW=/work/main/target/release/tcptune
$NEW emu down $N >/dev/null 2>&1; $NEW emu up $N --rtt ${RTT}ms --rate 1gbit >/dev/null 2>&1 || exit 1
for B in "$@"; do
  ip netns exec tt-$N-b iperf3 -s >/dev/null 2>&1 & ip1=$!
  ip netns exec tt-$N-b $B serve --no-path-db >/dev/null 2>&1 & sp=$!
  sleep 0.5
  ip netns exec tt-$N-a iperf3 -c 198.19.0.1 -P $P -t 12 -J > /tmp/ab/ip.json 2>/dev/null & ic=$!
  sleep 3
  ip netns exec tt-$N-a $B send 198.19.0.1 -P $P -t 6 --no-path-db --json ${EXTRA:-} > /tmp/ab/s.json 2>/dev/null
  wait $ic; kill $ip1 $sp; wait 2>/dev/null
  python3 - "$B" <<'PY'
import json,sys
d=json.load(open('/tmp/ab/s.json'));t=d['end']['tcptune']
print(sys.argv[1], 'used', t['streams_used'], 'reason:', (t.get('streams_reason') or '-')[:150])
for iv in d['intervals']:
    print(' ', round(iv['sum']['bits_per_second']/1e6), [round(s['bits_per_second']/1e6) for s in iv['streams']])
m=d['start']['tcptune']['measurement'].get('in_band') or {}
print('  measured', m.get('rate_bps',0)/1e6 if m else None, 'after', m.get('after_s'))
for s in t['streams'][:8]:
    print('  ', {k:s.get(k) for k in ('index','sndbuf_bytes','peak_sndbuf_bytes','peak_rcvbuf_bytes','min_rtt_us','rwnd_limited_pct','sndbuf_limited_pct') if k in s})
PY
done
$NEW emu down $N >/dev/null 2>&1
