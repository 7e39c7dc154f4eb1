#!/usr/bin/env bash
# A/B of `tcptune advise` against a fresh `serve` across the emulator's 50 ms x 200 Mbit/s
# (193 Mbit/s of goodput), both directions: NEW and OLD binaries interleaved, RUNS runs each.
# LOADED=1 pins the emulator, server and client to CPU 0 beside three busy loops (a loaded
# host, as CI's). One TSV row per advice on stdout:
#   label commit loaded direction rate_bps rounds seconds
# Needs root. Usage: NEW=... OLD=... RUNS=12 LOADED=1 bash advise.sh > advise-loaded.tsv
set -euo pipefail
: "${NEW:?path of the new binary}" "${OLD:?path of the old binary}"
RUNS=${RUNS:-6}
LOADED=${LOADED:-0}
PIN=()
busy=()
cleanup() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null || true; }
trap cleanup EXIT
if [ "$LOADED" = 1 ]; then
  PIN=(taskset -c 0)
  for _ in 1 2 3; do taskset -c 0 sh -c 'while :; do :; done' & busy+=($!); done
fi
printf '# date: %s\n# host: %s, %s CPUs, loaded=%s\n' "$(date -u '+%F %H:%M UTC')" "$(uname -sr)" "$(nproc)" "$LOADED"
printf 'label\tcommit\tloaded\tdirection\trate_bps\trounds\tseconds\n'
for i in $(seq "$RUNS"); do
  for label in new old; do
    B=$NEW; [ "$label" = old ] && B=$OLD
    commit=$("$B" --version | awk '{print $NF}' | tr -d '()')
    D=$(mktemp -d)
    "${PIN[@]}" "$B" emu run --name "adv$i" --rtt 50ms --rate 200mbit \
      --server "$B serve --path-db $D/db.sqlite" -- \
      sh -c "'$B' advise \"\$TCPTUNE_PEER\" --json > $D/send.json; '$B' advise \"\$TCPTUNE_PEER\" -R --fresh --json > $D/receive.json" >/dev/null 2>&1
    for dir in send receive; do
      python3 - "$D/$dir.json" "$label" "$commit" "$LOADED" <<'PY'
import json, sys
f, label, commit, loaded = sys.argv[1:]
d = json.load(open(f))
m = d.get("measurement") or {}
print("\t".join(str(x) for x in [label, commit, loaded, d["direction"], d["rate_bps"], m.get("rounds"), m.get("seconds")]))
PY
    done
    rm -rf "$D"
  done
done
