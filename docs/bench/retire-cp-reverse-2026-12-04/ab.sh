#!/bin/bash
# Interleaved A/B of the binary before (BASE) and after (NEW) across a running emu path:
#   cp push and cp pull of a 1 GiB file (tmpfs to tmpfs), and send -R -n 1024 (pull of the
#   pattern), each with --no-path-db (a path never seen), REPS rounds, base then new.
# Setup (root), e.g. for EMU=nw at 100 ms:
#   tcptune emu up nw --rtt 100ms --rate 1gbit
#   head -c 1G /dev/urandom > /dev/shm/tt/srv/big; mkdir -p /dev/shm/tt/dst /dev/shm/tt/pulled
#   $NEW  emu exec nw b -- $NEW  serve -p 5310 --root /dev/shm/tt --allow-anonymous-writes --careful-resume --no-path-db &
#   $BASE emu exec nw b -- $BASE serve -p 5311 --root /dev/shm/tt --allow-anonymous-writes --careful-resume --no-path-db &
# Output (tab-separated, one row per run): rtt_ms rep commit tool what wall_s client_cpu_s
#   (user+sys of the client command, from /usr/bin/time) cpu_s remote_cpu_s (from --json)
#   streams_kept (the count the streams closed to, "-" when they all stayed)
N=${NEW:-/work/main/target/release/tcptune}; B=${BASE:-/work/base-target/release/tcptune}
EMU=${EMU:-nw}; RTT=${RTT:-100}; REPS=${REPS:-3}
printf 'rtt_ms\trep\tcommit\ttool\twhat\twall_s\tclient_cpu_s\tcpu_s\tremote_cpu_s\tstreams_kept\n'
for rep in $(seq 1 "$REPS"); do
  for bin in base new; do
    if [ $bin = base ]; then T=$B; P=5311; else T=$N; P=5310; fi
    commit=$($T --version | sed 's/.*commit \([0-9a-f]*\).*/\1/' | cut -c1-7)
    for what in push pull send-R; do
      rm -f /dev/shm/tt/pulled/big /dev/shm/tt/dst/big
      case $what in
        pull) args=(cp --json --no-progress --no-path-db "tcptune://198.19.0.1:$P/srv/big" /dev/shm/tt/pulled/big) ;;
        push) args=(cp --json --no-progress --no-path-db /dev/shm/tt/srv/big "tcptune://198.19.0.1:$P/dst/big") ;;
        send-R) args=(send 198.19.0.1 -p $P -R -n 1024 --no-path-db --json) ;;
      esac
      /usr/bin/time -f "%e %U %S" -o /tmp/ab.time "$T" emu exec "$EMU" a -- "$T" "${args[@]}" > /tmp/ab.json 2>/tmp/ab.err
      python3 - "$RTT" "$rep" "$commit" "$bin" "$what" <<'P'
import json, re, sys
d = json.load(open('/tmp/ab.json'))
t = open('/tmp/ab.time').read().split()[-3:]
if 'end' in d:  # send's iperf3-shaped report
    reason = d['end']['tcptune'].get('streams_reason') or ''
    cpu = d['end'].get('cpu_utilization_percent', {})
    local, remote = cpu.get('host_total'), cpu.get('remote_total')
    local = remote = '-'
else:
    reason = d.get('streams_reason') or ''
    local, remote = d.get('cpu_s'), d.get('remote_cpu_s')
m = re.search(r'ran with the (\d+)', reason)
fmt = lambda v: '-' if v in (None, '-') else f'{float(v):.3f}'
print(*sys.argv[1:], t[0], f'{float(t[1]) + float(t[2]):.2f}', fmt(local), fmt(remote),
      m.group(1) if m else '-', sep='\t')
P
    done
  done
done
