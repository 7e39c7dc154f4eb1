#!/usr/bin/env bash
# The rate targets that used to be test assertions, measured as medians and ratios.
#
# Rates depend on the machine's load and on the build, so `cargo test` only checks what
# cannot be noise (data crosses, packets are conserved, nothing beats the bottleneck, the
# emulator never delivers early). The targets live here:
#
#   flow_100m_50ms   one iperf3 flow, 100 Mbit/s, RTT 50 ms: link rate within 0.90-1.01 of
#                    the rate, p99 lateness < 3 ms, goodput >= 0.80 (was emu/tests/throughput.rs)
#   flow_1g_100ms    the same at 1 Gbit/s, RTT 100 ms (was emu/tests/throughput.rs)
#   emu_run_100m     `emu run --server iperf3` at 100 Mbit/s, RTT 20 ms, 4 s: goodput
#                    0.70-1.01 of the rate (was cli/tests/emu_cli.rs)
#   doctor_probe     `tcptune doctor HOST` across 50 Mbit/s, RTT 20 ms: probe 0.50-1.05 of
#                    the rate (was cli/tests/doctor_emu.rs)
#   lab_calibration  the lab's calibration at 1 Gbit/s (one well-buffered transfer, 10 ms):
#                    faithful, i.e. >= 0.85 of the rate and p99 lateness <= 2 ms (was
#                    cli/tests/lab.rs)
#
# Prints one line per repetition and a table of medians, ratios and whether the target held.
# Usage: sudo bench/emu_rates.sh   (env: REPS=3 TCPTUNE=target/release/tcptune ONLY="flow_100m_50ms ...")
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/emu_common.sh
need iperf3 ip python3
ONLY=${ONLY:-"flow_100m_50ms flow_1g_100ms emu_run_100m doctor_probe lab_calibration"}
NAME="rates$$"
TMP=$(mktemp -d)
cleanup() { "$TCPTUNE" emu down "$NAME" >/dev/null 2>&1 || true; rm -rf "$TMP"; }
trap cleanup EXIT

echo "# emu rates $(date -u +%FT%TZ) $(uname -r) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $("$TCPTUNE" --version)"
RESULTS=()
record() { # record NAME VALUE...
    RESULTS+=("$*")
    echo "  $*"
}

# flow NAME RATE RTT SECS: the old throughput tests (link rate from the emulator's own
# counters after a 3 s warm-up, lateness, iperf3's goodput).
flow() {
    local name=$1 rate=$2 rtt=$3 secs=$4 i r
    echo "$name: iperf3 $secs s over --rate $rate --rtt $rtt"
    for i in $(seq "$REPS"); do
        r=$(emu_iperf "$secs" 3 --rtt "$rtt" --rate "$rate")
        record "$name" "$rate" $r
    done
}

emu_run_100m() {
    echo "emu_run_100m: emu run --server 'iperf3 -s -1' at 100mbit, rtt 20ms, 4 s"
    local i g
    for i in $(seq "$REPS"); do
        g=$("$TCPTUNE" emu run --rtt 20ms --rate 100mbit --server 'iperf3 -s -1' \
                -- sh -c 'iperf3 -c $TCPTUNE_PEER -t 4 -J' 2>/dev/null |
            python3 -c 'import json,sys
try: print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))
except Exception: print("nan")')
        record emu_run_100m 100mbit "$g"
    done
}

doctor_probe() {
    echo "doctor_probe: tcptune doctor across 50mbit, rtt 20ms"
    local i p
    for i in $(seq "$REPS"); do
        "$TCPTUNE" emu up "$NAME" --rtt 20ms --rate 50mbit >/dev/null 2>&1
        "$TCPTUNE" emu exec "$NAME" b -- "$TCPTUNE" serve -B 198.19.0.1 -p 5310 >/dev/null 2>&1 &
        sleep 1
        p=$("$TCPTUNE" emu exec "$NAME" a -- "$TCPTUNE" doctor 198.19.0.1 --json --samples 7 \
                --probe-time 3s 2>/dev/null |
            python3 -c 'import json,sys
try: print("%.1f" % (json.load(sys.stdin)["path"]["probe"]["bits_per_second"] / 1e6))
except Exception: print("nan")')
        "$TCPTUNE" emu down "$NAME" >/dev/null 2>&1 || true
        wait || true
        record doctor_probe 50mbit "$p"
    done
}

lab_calibration() {
    echo "lab_calibration: the lab's emulator check at 1gbit (rtt 10ms)"
    local i out
    cat >"$TMP/plan.toml" <<'TOML'
name = "calibration"
rate = "1gbit"
rtts = ["0.5ms"]
streams = [1]
repetitions = 1
congestion = "default"
[hosts]
untuned = ["none"]
TOML
    for i in $(seq "$REPS"); do
        out="$TMP/lab$i"
        "$TCPTUNE" lab --plan "$TMP/plan.toml" --force --no-progress --out "$out" >/dev/null 2>&1 || true
        python3 - "$out/meta.json" <<'PY'
import json, sys
try:
    c = json.load(open(sys.argv[1]))["calibration"]
    print("  lab_calibration 1gbit %.1f %.0f %s" % (c["throughput_bps"] / 1e6,
          c.get("lateness_p99_us") or float("nan"), "faithful" if c["faithful"] else "unfaithful"))
except Exception as e:
    print("  lab_calibration 1gbit nan nan failed")
PY
    done | tee "$TMP/cal"
    while read -r line; do RESULTS+=("${line#  }"); done <"$TMP/cal"
}

for t in $ONLY; do
    case "$t" in
        flow_100m_50ms) flow flow_100m_50ms 100mbit 50ms 8 ;;
        flow_1g_100ms) flow flow_1g_100ms 1gbit 100ms 8 ;;
        emu_run_100m) emu_run_100m ;;
        doctor_probe) doctor_probe ;;
        lab_calibration) lab_calibration ;;
        *) echo "unknown measurement $t" >&2; exit 2 ;;
    esac
done

echo
printf '%s\n' "${RESULTS[@]}" | python3 -c '
import math, statistics, sys
rows = {}
for line in sys.stdin:
    f = line.split()
    if len(f) >= 3:
        rows.setdefault((f[0], f[1]), []).append(f[2:])
def mbit(rate):
    return float(rate[:-4]) * {"k": 1e-3, "m": 1, "g": 1e3}[rate[-4]]
def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")
print("%-16s %-8s %5s %10s %7s %9s %s" % ("measurement", "rate", "runs", "median", "ratio", "p99_us", "target held"))
for (name, rate), runs in rows.items():
    want = mbit(rate)
    col = lambda i: med([float(r[i]) if len(r) > i else float("nan") for r in runs])
    if name.startswith("flow_"):
        link, p99, good = col(0), col(2), col(4)
        ratio = link / want
        held = 0.90 <= ratio <= 1.01 and p99 < 3000 and good >= 0.80 * want
        print("%-16s %-8s %5d %10.1f %7.3f %9.0f %s (goodput %.1f)" % (name, rate, len(runs), link, ratio, p99, "yes" if held else "NO", good))
    elif name == "lab_calibration":
        tput, p99 = col(0), col(1)
        faithful = sum(r[2] == "faithful" for r in runs)
        print("%-16s %-8s %5d %10.1f %7.3f %9.0f %s (%d/%d faithful)" % (name, rate, len(runs), tput, tput / want, p99, "yes" if faithful * 2 > len(runs) else "NO", faithful, len(runs)))
    else:
        v = col(0)
        lo, hi = {"emu_run_100m": (0.70, 1.01), "doctor_probe": (0.50, 1.05)}[name]
        ratio = v / want
        print("%-16s %-8s %5d %10.1f %7.3f %9s %s" % (name, rate, len(runs), v, ratio, "-", "yes" if lo <= ratio <= hi else "NO"))
'
