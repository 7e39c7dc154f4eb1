#!/usr/bin/env bash
# A/B of what a pull's in-band measurement reads (send -R, path never seen) across the
# emulator: NEW and OLD binaries interleaved, ROUNDS rounds, each cell of CELLS
# ("RTT:RATE:MiB"). One TSV row per run on stdout:
#   label commit rtt rate mib in_band_bps rounds after_s goodput_bps wall_s peak_rcvbuf_total peak_rmem_alloc
# Needs root (the emulator's namespaces). Usage:
#   NEW=target/release/tcptune OLD=/tmp/old/tcptune ROUNDS=3 bash pull.sh > pulls.tsv
set -euo pipefail
: "${NEW:?path of the new binary}" "${OLD:?path of the old binary}"
ROUNDS=${ROUNDS:-3}
CELLS=${CELLS:-"50ms:200mbit:64 100ms:1gbit:512"}
printf '# date: %s\n# host: %s, %s CPUs\n' "$(date -u '+%F %H:%M UTC')" "$(uname -sr)" "$(nproc)"
printf 'label\tcommit\trtt\trate\tmib\tin_band_bps\trounds\tafter_s\tgoodput_bps\twall_s\tpeak_rcvbuf_total\tpeak_rmem_alloc\n'
for r in $(seq "$ROUNDS"); do
  for cell in $CELLS; do
    IFS=: read -r rtt rate mib <<<"$cell"
    for label in new old; do
      B=$NEW; [ "$label" = old ] && B=$OLD
      commit=$("$B" --version | awk '{print $NF}' | tr -d '()')
      D=$(mktemp -d)
      s=$(date +%s.%N)
      "$B" emu run --name "ph$r" --rtt "$rtt" --rate "$rate" --server "$B serve --no-path-db" -- \
        sh -c "'$B' send \"\$TCPTUNE_PEER\" -R -n $mib --no-path-db --json > $D/out.json" >/dev/null 2>&1
      e=$(date +%s.%N)
      python3 - "$D/out.json" "$label" "$commit" "$rtt" "$rate" "$mib" "$s" "$e" <<'PY'
import json, sys
f, label, commit, rtt, rate, mib, s, e = sys.argv[1:]
d = json.load(open(f))
ib = d["start"]["tcptune"]["measurement"].get("in_band") or {}
t = d["end"]["tcptune"]
print("\t".join(str(x) for x in [label, commit, rtt, rate, mib, ib.get("rate_bps"), ib.get("rounds"),
      ib.get("after_s"), round(d["end"]["sum_received"]["bits_per_second"]), "%.3f" % (float(e) - float(s)),
      t.get("peak_rcvbuf_total_bytes"), t.get("peak_rmem_alloc_bytes")]))
PY
      rm -rf "$D"
    done
  done
done
