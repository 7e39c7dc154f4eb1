#!/bin/bash
# 128 MiB pushed on a path never seen across a running emu path at 100 ms / 1 Gbit/s (the
# lab's new-path cell), with the streams auto measures with (-P 1: its 8) and with more
# asked (-P 16, -P 32), interleaved, REPS rounds; and the lossless slow-start bound for each.
# Setup (root): tcptune emu up ss --rtt 100ms --rate 1gbit
#               tcptune emu exec ss b -- tcptune serve --careful-resume --no-path-db &
# Output: tab-separated rows: rep commit P streams_used seconds (first byte to last at the
#   receiver, send --json's sum_received) retransmits.
T=${T:-/work/main/target/release/tcptune}; EMU=${EMU:-ss}; REPS=${REPS:-3}
commit=$($T --version | sed 's/.*commit \([0-9a-f]*\).*/\1/' | cut -c1-7)
printf 'rep\tcommit\tP\tstreams_used\tseconds\tretransmits\n'
for rep in $(seq 1 "$REPS"); do
  for P in 1 16 32; do
    $T emu exec "$EMU" a -- $T send 198.19.0.1 -n 128 -P $P --no-path-db --json > /tmp/ss.json
    python3 - "$rep" "$commit" "$P" <<'PY'
import json, sys
d = json.load(open('/tmp/ss.json'))
t = d['end']['tcptune']; r = d['end']['sum_received']
rtx = sum(s['sender']['retransmits'] for s in t['streams'])
print(*sys.argv[1:], t['streams_used'], f"{r['seconds']:.3f}", rtx, sep='\t')
PY
  done
done
