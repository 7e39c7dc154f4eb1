# Shared helpers of bench/emu_*.sh (sourced, not run). Needs root, iperf3, iproute2, python3.

TCPTUNE=${TCPTUNE:-target/release/tcptune}
REPS=${REPS:-3}
# A command prefix that runs tcptune as another user (bench/emu_rootless.sh sets it), and a
# directory that user may write (for --stats-json).
EMU_AS=()
EMU_TMP=${EMU_TMP:-}
# Per-namespace buffers big enough for the largest BDP measured (never the global
# net.core.rmem_max/wmem_max).
EMU_SYSCTLS=(--sysctl "net.ipv4.tcp_rmem=4096 131072 536870912"
             --sysctl "net.ipv4.tcp_wmem=4096 16384 536870912")

need() {
    for t in "$@"; do
        command -v "$t" >/dev/null || { echo "missing: $t" >&2; exit 5; }
    done
    [ "$(id -u)" = 0 ] || { echo "run as root (network namespaces)" >&2; exit 5; }
    [ -x "$TCPTUNE" ] || { echo "build first: cargo build --release (or set TCPTUNE=)" >&2; exit 5; }
}

# json_lines FILE: the JSON documents written one after another to FILE (reports of several
# commands), one per line
json_lines() {
    python3 -c '
import json, sys
text = open(sys.argv[1]).read()
dec, i = json.JSONDecoder(), 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    doc, i = dec.raw_decode(text, i)
    print(json.dumps(doc))
' "$1"
}

# tsv_line FIELD...: the fields tab-separated on one line (a raw file's row)
tsv_line() { local IFS=$'\t'; printf '%s\n' "$*"; }
# nan_exit VALUE...: a row's exit column, 1 when a measurement failed (any value nan), else 0
nan_exit() { case "$*" in *nan*) echo 1 ;; *) echo 0 ;; esac; }

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print a[int((NR+1)/2)]}'; }

# Run iperf3 across an emulated path (extra iperf3 options in IPERF_ARGS, e.g. "-C cubic").
# emu_iperf SECS WARMUP [emu run path options...] -> "link_mbit p50_us p99_us max_us goodput_mbit drops"
emu_iperf() {
    local secs=$1 warm=$2; shift 2
    local stats json
    stats=$(mktemp ${EMU_TMP:+-p "$EMU_TMP"}) json=$(mktemp)
    [ -z "$EMU_TMP" ] || chmod 666 "$stats"
    ${EMU_AS[@]+"${EMU_AS[@]}"} "$TCPTUNE" emu run "$@" "${EMU_SYSCTLS[@]}" --warmup "${warm}s" --stats-json "$stats" \
        --server 'iperf3 -s -1 >/dev/null' \
        -- sh -c "iperf3 -c \$TCPTUNE_PEER -t $secs -J ${IPERF_ARGS:-}" >"$json" 2>/dev/null || true
    python3 - "$stats" "$json" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))["a_to_b"]
    link = s["bytes_out"] * 8 / max(s["window_s"], 1e-9) / 1e6
    l = s["lateness"]
    drops = s["drops"]["queue"] + s["drops"]["loss"]
    p50, p99, mx = l["p50_us"], l["p99_us"], l["max_us"]
except Exception:
    link = p50 = p99 = mx = float("nan"); drops = -1
try:
    g = json.load(open(sys.argv[2]))["end"]["sum_received"]["bits_per_second"] / 1e6
except Exception:
    g = float("nan")
print(f"{link:.1f} {p50:.0f} {p99:.0f} {mx:.0f} {g:.1f} {drops}")
PY
    rm -f "$stats" "$json"
}

# Two namespaces joined by a plain veth pair (the physical limit), same addresses as emu.
VETH_NS=()
veth_up() { # veth_up MTU
    local mtu=$1 a="tt-vbench-$$-a" b="tt-vbench-$$-b"
    ip netns add "$a"; ip netns add "$b"; VETH_NS=("$a" "$b")
    ip link add tt-va netns "$a" mtu "$mtu" type veth peer name tt-vb netns "$b" mtu "$mtu"
    ip -n "$a" addr add 198.18.0.1/32 peer 198.19.0.1/32 dev tt-va
    ip -n "$b" addr add 198.19.0.1/32 peer 198.18.0.1/32 dev tt-vb
    for ns in "$a" "$b"; do
        ip -n "$ns" link set lo up
        ip -n "$ns" link set dev "tt-v${ns: -1}" up
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 131072 536870912" \
            net.ipv4.tcp_wmem="4096 16384 536870912"
    done
}
veth_down() {
    local ns
    for ns in "${VETH_NS[@]}"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    VETH_NS=()
}
# veth_iperf SECS -> goodput_mbit
veth_iperf() {
    local secs=$1 a=${VETH_NS[0]} b=${VETH_NS[1]}
    ip netns exec "$b" iperf3 -s -1 >/dev/null 2>&1 &
    sleep 0.5
    ip netns exec "$a" iperf3 -c 198.19.0.1 -t "$secs" -J 2>/dev/null | python3 -c '
import json, sys
try: print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))
except Exception: print("nan")'
    wait || true
}

# The host's CPU steal time (a VM's hypervisor running others on its cores) over a run:
# steal_mark prints a mark; steal_pct MARK prints the percentage of CPU time stolen since.
steal_mark() { awk '/^cpu /{t=0; for (i=2; i<=NF; i++) t+=$i; print $9, t}' /proc/stat; }
steal_pct() {
    local s0=$1 t0=$2
    awk -v s0="$s0" -v t0="$t0" '/^cpu /{t=0; for (i=2; i<=NF; i++) t+=$i;
        printf "%.1f", (t > t0) ? 100 * ($9 - s0) / (t - t0) : 0}' /proc/stat
}

# How late this host wakes a real-time thread (what the emulator's threads are) from a
# 200 us sleep, idle: "p50 X p99 Y us" over 2000 sleeps. A VM whose hypervisor is busy wakes
# it late, and every packet the emulator holds inherits that.
wakeup_late() {
    chrt -f 10 python3 -c '
import time
d = []
for _ in range(2000):
    t = time.perf_counter(); time.sleep(0.0002); d.append((time.perf_counter() - t - 0.0002) * 1e6)
d.sort(); print("p50 %.0f p99 %.0f us" % (d[1000], d[1980]))' 2>/dev/null || echo "unknown"
}

# A raw file's run: run_start notes the binary's commit ($commit), the load, the steal and
# the host's wake-up lateness before the run; run_meta prints the `# date/host/load` lines.
run_start() {
    commit=$("$TCPTUNE" --version | sed -n 's/.*commit \([0-9a-f]*\).*/\1/p')
    commit=${commit:-unknown}
    RUN_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
    RUN_STEAL=$(steal_mark)
    RUN_WAKEUP=$(wakeup_late)
}
run_meta() {
    echo "# date: $(date -u '+%F %H:%M UTC')"
    echo "# host: Linux $(uname -r), $(nproc) CPUs; a real-time thread's 200 us sleep, idle, overslept $RUN_WAKEUP"
    # shellcheck disable=SC2086
    echo "# load: load average $RUN_LOAD before and $(cut -d' ' -f1-3 /proc/loadavg) after, CPU steal $(steal_pct $RUN_STEAL)% over the run"
}
