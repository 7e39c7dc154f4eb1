#!/usr/bin/env bash
# Path alone, duration runs: BASE=OLD_BINARY [NEW=BINARY] [OUT=FILE] alone.sh (root: emu); base and new interleaved, one TSV row per run.
set -u
NEW=${NEW:-target/release/tcptune} BASE=${BASE:?the binary before}
N=alone
mkdir -p /tmp/ab; out=${OUT:-/tmp/ab/alone.tsv}
echo -e "rtt_ms\tstreams\tbin\trep\tgbps_recv\tstreams_used\tpeak_sndbuf_total\tpeak_rcvbuf_total\treason" > $out
for rtt in 25 100; do
  $NEW emu down $N >/dev/null 2>&1
  $NEW emu up $N --rtt ${rtt}ms --rate 1gbit >/dev/null 2>&1 || exit 1
  for rep in 1 2 3; do
    for P in 1 4; do
      for which in base new; do
        B=$BASE; [ $which = new ] && B=$NEW
        ip netns exec tt-$N-b $B serve --no-path-db >/dev/null 2>&1 & sp=$!
        sleep 0.5
        ip netns exec tt-$N-a $B send 198.19.0.1 -P $P -t 10 --no-path-db --json > /tmp/ab/a.json 2>/dev/null
        kill $sp; wait $sp 2>/dev/null
        python3 - "$rtt" "$P" "$which" "$rep" >> $out <<'PY'
import json,sys
d=json.load(open('/tmp/ab/a.json'));t=d['end']['tcptune']
print("\t".join(sys.argv[1:]+[f"{d['end']['sum_received']['bits_per_second']/1e9:.4f}",str(t['streams_used']),str(t['peak_sndbuf_total_bytes']),str(t['peak_rcvbuf_total_bytes']),(t.get('streams_reason') or '-')[:60]]))
PY
      done
    done
  done
done
$NEW emu down $N >/dev/null 2>&1
