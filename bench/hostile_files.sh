#!/usr/bin/env bash
# How much memory each attack on the copy protocol costs a real `tcptune serve --root`.
#
# Starts `tcptune serve --root DIR` on loopback with its defaults, then runs each attack of
# crates/transfer/tests/hostile_files.rs against it (TCPTUNE_HOSTILE_TARGET/ROOT), one at a
# time, each with its two honest copies. Before each attack the server's peak RSS is reset
# (/proc/PID/clear_refs 5); after it, the peak (VmHWM) less the RSS before is the attack's
# growth. The target (issue 20) is at most 64 MiB per attack. Each attack's refusal and the
# honest copies are asserted by the test itself; the server must still be alive at the end.
# Writes the raw rows (attack, rss_before_kib, peak_kib, growth_kib, commit) to OUT.
#
# Usage: bench/hostile_files.sh [--out FILE]   (needs a Linux /proc; run as any user)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/raw/hostile_files.tsv
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
cargo build --release --locked -p tcptune >/dev/null
test_bin=$(cargo test --release --locked -p tcptune-transfer --test hostile_files --no-run \
  --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "hostile_files":
        print(m["executable"])')
root=$(mktemp -d /tmp/tcptune-hostile-bench.XXXXXX)
log="$root.log"
./target/release/tcptune serve -B 127.0.0.1 -p 0 --root "$root" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$root" "$log"' EXIT
port=""
for _ in $(seq 100); do
  port=$(grep -o '127\.0\.0\.1:[0-9]*' "$log" | head -1 | cut -d: -f2 || true)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "serve did not start:" >&2; cat "$log" >&2; exit 1; }
kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"; }
commit=$(git rev-parse --short HEAD)
printf '# command: sudo bench/hostile_files.sh\n' >"$OUT"
printf 'attack\trss_before_kib\tpeak_kib\tgrowth_kib\tcommit\n' >>"$OUT"
for attack in $("$test_bin" --list 2>/dev/null | sed -n 's/: test$//p'); do
  rm -rf "${root:?}"/*
  echo 5 >"/proc/$pid/clear_refs"
  before=$(kib VmRSS)
  TCPTUNE_HOSTILE_TARGET="127.0.0.1:$port" TCPTUNE_HOSTILE_ROOT="$root" \
    "$test_bin" --exact "$attack" --test-threads=1 >"$root.out" 2>&1 \
    || { echo "$attack failed:" >&2; cat "$root.out" >&2; exit 1; }
  peak=$(kib VmHWM)
  printf '%s\t%s\t%s\t%s\t%s\n' "$attack" "$before" "$peak" "$((peak - before))" "$commit" >>"$OUT"
  printf '%-90s +%6d KiB\n' "$attack" "$((peak - before))"
done
rm -f "$root.out"
kill -0 $pid || { echo "the server died" >&2; exit 1; }
echo "server alive after every attack; rows in $OUT"
# docs/bench/hostile_files.md and the summary row are bench/tables' (from bench/raw/hostile_files.tsv).
if [ "$(readlink -f "$OUT")" = "$(readlink -f bench/raw/hostile_files.tsv)" ]; then python3 bench/tables; fi
