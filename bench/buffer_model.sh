#!/usr/bin/env bash
# How much data does a Linux socket buffer of B bytes keep in flight? The answer is the
# constant behind every "one stream can reach at most X at RTT R" tcptune prints (doctor's
# sizing, the auto tuner's stream count, the probe's socket ceiling): core::linux's
# SNDBUF_PAYLOAD_FRACTION and RCVBUF_WINDOW_FRACTION.
#
# Method: one cubic flow across the emulator at 1 Gbit/s x RTT 100 ms (BDP 12.5 MB), with
# only one end's autotuning maximum small (4 MiB), for DURATION seconds; the steady-state
# throughput over the second half of the run (slow start excluded) times the RTT is the
# data the limiting buffer kept in flight. Both ends' peak buffers come from SO_MEMINFO
# (tcptune send --tune kernel reports them). REPS repetitions, interleaved; medians.
#
# Writes every run to bench/raw/buffer_model.tsv (RAW=) and docs/bench/buffer_model.md from it
# with bench/tables.
#
# Usage: sudo bench/buffer_model.sh [--reps N] [--duration SECS]
set -euo pipefail
cd "$(dirname "$0")/.."
TCPTUNE=${TCPTUNE:-target/release/tcptune}
REPS=5
DUR=16
while [ $# -gt 0 ]; do
    case $1 in
        --reps) REPS=$2; shift 2 ;;
        --duration) DUR=$2; shift 2 ;;
        *) echo "usage: $0 [--reps N] [--duration SECS]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces)" >&2; exit 5; }
[ -x "$TCPTUNE" ] || { echo "build first: cargo build --release (or set TCPTUNE=)" >&2; exit 5; }
command -v python3 >/dev/null || { echo "missing: python3" >&2; exit 5; }

SMALL=4194304
BIG=268435456
RTT_MS=100
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# run CASE REP: CASE is "send" (sender's tcp_wmem max small) or "recv" (receiver's tcp_rmem max small)
run() {
    local case=$1 rep=$2 wmem rmem
    if [ "$case" = send ]; then
        wmem="4096 16384 $SMALL"; rmem="4096 131072 $BIG"
    else
        wmem="4096 16384 $BIG"; rmem="4096 131072 $SMALL"
    fi
    "$TCPTUNE" emu run --rtt ${RTT_MS}ms --rate 1gbit --queue 1bdp \
        --sysctl "net.ipv4.tcp_wmem=$wmem" --sysctl "net.ipv4.tcp_rmem=$rmem" \
        --server "$TCPTUNE serve >/dev/null 2>&1" \
        -- sh -c "\"$TCPTUNE\" send \$TCPTUNE_PEER --tune kernel -C cubic -t $DUR -i 1 --no-path-db --json --no-progress" \
        >"$out/$case.$rep.json" 2>/dev/null || echo "run $case $rep failed" >&2
}

for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then run send "$rep"; run recv "$rep"; else run recv "$rep"; run send "$rep"; fi
    echo "repetition $rep of $REPS done" >&2
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
RAW=${RAW:-bench/raw/buffer_model.tsv}
python3 - "$out" "$REPS" "$DUR" "$SMALL" "$RTT_MS" "$RAW" "$TCPTUNE" "$load_before" "$load_after" <<'PY'
import json, sys, glob, os, datetime, platform
sys.path.insert(0, "bench")
from benchlib import commit_of  # noqa: E402
out, reps, dur, small, rtt_ms, raw, binary, load0, load1 = sys.argv[1:10]
reps, dur, small, rtt_ms = int(reps), float(dur), int(small), float(rtt_ms)
commit = commit_of(binary)
lines = [
    f"# command: sudo bench/buffer_model.sh --reps {reps} --duration {dur:g}",
    f"# date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
    f"# host: Linux {platform.release()}, {os.cpu_count()} CPUs, tcptune emu at 1 Gbit/s x "
    f"{rtt_ms:g} ms, queue 1 BDP, cubic",
    f"# load: load average {load0} before and {load1} after",
    f"# small: {small}",
    "# steady: the second half of each run; inflight_bytes = its rate x the sender's min RTT; "
    "buffer_bytes = the limiting end's peak SO_MEMINFO buffer",
    "part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\tbits_per_s\t"
    "rtt_min_us\tbuffer_bytes\tinflight_bytes\texit",
]
for case in ("send", "recv"):
    opts = (f"tcp_wmem max {small}, tcp_rmem max 256 MiB" if case == "send"
            else f"tcp_rmem max {small}, tcp_wmem max 256 MiB")
    for rep in range(1, reps + 1):
        f = os.path.join(out, f"{case}.{rep}.json")
        row = ["model", case, "tcptune send --tune kernel -C cubic", commit, opts, str(rep)]
        try:
            r = json.load(open(f))
            iv = [i["sum"] for i in r.get("intervals", []) if i["sum"]["start"] >= dur / 2]
            secs = sum(i["seconds"] for i in iv)
            nbytes = sum(i["bytes"] for i in iv)
            bps = nbytes * 8 / secs
            d = r["end"]["tcptune"]["streams"][0]
            rtt_us = d["sender"].get("rtt_min_us") or rtt_ms * 1000
            buf = (d["sender"]["peak_sndbuf_bytes"] if case == "send"
                   else d["receiver"]["peak_rcvbuf_bytes"])
            inflight = bps / 8 * rtt_us / 1e6
            row += [f"{secs:.3f}", str(nbytes), "-", f"{bps:.0f}", str(rtt_us), str(buf),
                    f"{inflight:.0f}", "0"]
        except Exception:  # noqa: BLE001 - a failed run is a row that says so
            row += ["-", "0", "-", "-", "-", "-", "-", "1"]
        lines.append("\t".join(row))
open(raw, "w").write("\n".join(lines) + "\n")
print(f"wrote {raw}", file=sys.stderr)
PY
python3 bench/tables
