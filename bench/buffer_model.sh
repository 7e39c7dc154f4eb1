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
# Usage: sudo bench/buffer_model.sh [--reps N] [--duration SECS]   (writes docs/bench/buffer_model.md)
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

python3 - "$out" "$REPS" "$DUR" "$SMALL" "$RTT_MS" <<'PY' | tee docs/bench/buffer_model.md
import json, statistics, sys, glob, os
out, reps, dur, small, rtt_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rows = {}
for case in ("send", "recv"):
    vals = []
    for f in sorted(glob.glob(os.path.join(out, f"{case}.*.json"))):
        try:
            r = json.load(open(f))
        except Exception:
            continue
        iv = [i["sum"] for i in r.get("intervals", []) if i["sum"]["start"] >= dur / 2]
        if not iv:
            continue
        bps = sum(i["bytes"] for i in iv) * 8 / sum(i["seconds"] for i in iv)
        d = r["end"]["tcptune"]["streams"][0]
        rtt_s = (d["sender"].get("rtt_min_us") or rtt_ms * 1000) / 1e6
        inflight = bps / 8 * rtt_s
        buf = d["sender"]["peak_sndbuf_bytes"] if case == "send" else d["receiver"]["peak_rcvbuf_bytes"]
        vals.append((bps, inflight, buf))
    rows[case] = vals
print("# Socket buffer: data in flight per byte of buffer (measured)\n")
print(f"One cubic flow, emulated 1 Gbit/s x {rtt_ms:g} ms (BDP 12.5 MB), {dur:g} s per run, steady state = the second half;")
print(f"only one end's autotuning maximum is small ({small >> 20} MiB), the other's is 256 MiB. {reps} repetitions, medians (min-max).")
print("Produced by `sudo bench/buffer_model.sh`.\n")
print("| limiting buffer | peak sk buffer | steady throughput | data in flight | in flight / buffer |")
print("| --- | --- | --- | --- | --- |")
for case, name in (("send", "send (tcp_wmem max)"), ("recv", "receive (tcp_rmem max)")):
    v = rows.get(case) or []
    if not v:
        print(f"| {name} | - | - | - | no successful run |")
        continue
    med = lambda k: statistics.median(x[k] for x in v)
    frac = [x[1] / x[2] for x in v if x[2]]
    print(f"| {name} | {med(2) / 2**20:.2f} MiB | {med(0) / 1e6:.0f} Mbit/s | {med(1) / 2**20:.2f} MiB | "
          f"**{statistics.median(frac):.2f}** ({min(frac):.2f}-{max(frac):.2f}, n={len(frac)}) |")
PY
