#!/usr/bin/env bash
# Is a change slower for users? Two tcptune binaries (an older commit's and this one's) side by
# side in one run, repetitions interleaved (the order rotates), medians:
#
#   send : loopback, `send -t DURATION --tune kernel -P 1` and `-P 4`, each binary against its own
#          `serve`, iperf3 beside them as the reference bench/transfer_vs_iperf3.sh uses; clients
#          pinned to CPU 0 and servers to CPU 1 (taskset), as there. Receiver-measured bits/s and
#          CPU seconds (client + server).
#   cp   : across `tcptune emu` at 100 ms / 1 Gbit/s, tmpfs to tmpfs, a path never seen (a fresh
#          path database per run): push of a 1 GiB file, pull of it, push of a tree of 500 files of
#          256 KiB. Seconds from the command's start to its end and the client's CPU seconds.
#
# Every run is one line of bench/raw/old_vs_new.tsv (part, case, tool, commit, options, rep,
# seconds, bytes, cpu_s, bits_per_s); the tables in docs/bench/old_vs_new.md are made from that
# file by bench/tables, which this script runs at its end (`--table` runs it alone).
#
# Usage: sudo bench/old_vs_new.sh OLD_BINARY [NEW_BINARY] [send] [cp]   (default: both parts)
#        bench/old_vs_new.sh --table
# Environment: REPS (default 5 for send, 3 for cp), DURATION (default 5), OUT_TSV.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_TSV=${OUT_TSV:-bench/raw/old_vs_new.tsv}
export OUT_TSV

table() {
    # The tables are bench/tables' (docs/bench/old_vs_new.md from bench/raw/old_vs_new.tsv).
    if [ "$(readlink -f "$OUT_TSV")" != "$(readlink -f bench/raw/old_vs_new.tsv)" ]; then
        echo "raw rows in $OUT_TSV; bench/tables reads bench/raw/old_vs_new.tsv only" >&2
        return 0
    fi
    python3 bench/tables
}

if [ "${1:-}" = --table ]; then
    table
    exit 0
fi
[ $# -ge 1 ] || { sed -n '2,20p' "$0"; exit 2; }
OLD=$(readlink -f "$1"); shift
NEW=$(readlink -f target/release/tcptune)
if [ $# -gt 0 ] && [ -x "$1" ]; then NEW=$(readlink -f "$1"); shift; fi
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(send cp)
version_commit() { "$1" --version | sed -n 's/.*commit \([0-9a-f]*\).*/\1/p'; }
OLD_COMMIT=$(version_commit "$OLD")
NEW_COMMIT=$(version_commit "$NEW")
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 1; }
mkdir -p "$(dirname "$OUT_TSV")"
printf '# command: sudo REPS=%s DURATION=%s bench/old_vs_new.sh OLD_BINARY %s\n' "${REPS:-5}" "${DURATION:-5}" "${PARTS[*]}" >"$OUT_TSV"
printf 'part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\tbits_per_s\n' >>"$OUT_TSV"
export OLD NEW OLD_COMMIT NEW_COMMIT

send_part() {
    command -v iperf3 >/dev/null || { echo "iperf3 is needed (apt-get install -y iperf3)" >&2; exit 1; }
    REPS=${REPS:-5} DURATION=${DURATION:-5} python3 - <<'PY'
import json, os, resource, socket, subprocess, sys, time
REPS, DUR, TSV = int(os.environ["REPS"]), float(os.environ["DURATION"]), os.environ["OUT_TSV"]
TICK = os.sysconf("SC_CLK_TCK")
BINS = {"old": os.environ["OLD"], "new": os.environ["NEW"]}
COMMITS = {"old": os.environ["OLD_COMMIT"], "new": os.environ["NEW_COMMIT"], "iperf3": "-"}
PIN = os.cpu_count() >= 2
def pin(cpu, cmd):
    return (["taskset", "-c", str(cpu)] + cmd) if PIN else cmd
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK
def wait_port(port):
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"server on port {port} did not come up")
ports, servers = {}, {}
for t in ("old", "new", "iperf3"):
    ports[t] = free_port()
    cmd = (["iperf3", "-s", "-B", "127.0.0.1", "-p", str(ports[t])] if t == "iperf3" else
           [BINS[t], "serve", "--bind", "127.0.0.1", "--port", str(ports[t]), "--json", "--no-path-db"])
    servers[t] = subprocess.Popen(pin(1, cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for p in ports.values():
    wait_port(p)
time.sleep(0.3)
def options(t, streams):
    if t == "iperf3":
        return ["-t", str(DUR), "-P", str(streams), "-J"]
    return ["--no-path-db", "-t", str(DUR), "-P", str(streams), "--tune", "kernel", "--json",
            "--interval", "0", "--no-progress"]
def run(t, streams):
    cmd = (["iperf3", "-c", "127.0.0.1", "-p", str(ports[t])] if t == "iperf3" else
           [BINS[t], "send", "127.0.0.1", "--port", str(ports[t])]) + options(t, streams)
    s0, c0 = proc_cpu(servers[t].pid), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(pin(0, cmd), capture_output=True, text=True)
    c1, s1 = resource.getrusage(resource.RUSAGE_CHILDREN), proc_cpu(servers[t].pid)
    if out.returncode != 0:
        sys.exit(f"{t} failed ({out.returncode}): {out.stderr.strip()[:500]}")
    e = json.loads(out.stdout)["end"]["sum_received"]
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime) + (s1 - s0)
    return e["seconds"], e["bytes"], cpu, e["bits_per_second"]
tools = ["old", "new", "iperf3"]
with open(TSV, "a") as tsv:
    for streams in (1, 4):
        for rep in range(REPS):
            k = rep % len(tools)
            for t in tools[k:] + tools[:k]:
                secs, nbytes, cpu, bps = run(t, streams)
                opts = " ".join(options(t, streams))
                tsv.write(f"send\tP{streams}\t{t}\t{COMMITS[t]}\t{opts}\t{rep + 1}\t{secs:.3f}\t{nbytes}\t{cpu:.3f}\t{bps:.0f}\n")
                tsv.flush()
                print(f"send P{streams} rep {rep + 1}/{REPS} {t:6}: {bps / 1e9:6.2f} Gbit/s, {cpu:.2f} CPU-s", file=sys.stderr)
for s in servers.values():
    s.terminate()
PY
}

# A server's file in the binary's own spelling: tcptune://HOST/PATH since HOST:PATH means ssh,
# HOST:PATH in binaries from before that.
remote_operand() {
    if "$1" cp --help 2>/dev/null | grep -q 'tcptune://'; then echo "tcptune://$2/$3"; else echo "$2:$3"; fi
}

cp_cleanup() {
    [ ${#CP_PIDS[@]} -eq 0 ] || kill "${CP_PIDS[@]}" 2>/dev/null || true
    "$NEW" emu down "$CP_NAME" >/dev/null 2>&1 || true
    rm -rf "$CP_SHM" "$CP_OUT"
}

cp_part() {
    [ "$(id -u)" = 0 ] || { echo "run as root (network namespaces)" >&2; exit 5; }
    command -v ip >/dev/null || { echo "ip is needed (apt-get install -y iproute2)" >&2; exit 5; }
    local reps=${REPS:-3}
    CP_NAME="ovn$$" CP_SHM=$(mktemp -d -p /dev/shm) CP_OUT=$(mktemp -d) CP_PIDS=()
    trap cp_cleanup EXIT INT TERM
    local name=$CP_NAME shm=$CP_SHM out=$CP_OUT
    local a="tt-$name-a" b="tt-$name-b" peer=198.19.0.1
    "$NEW" emu up "$name" --rtt 100ms --rate 1gbit >/dev/null
    mkdir -p "$shm/src/tree" "$shm/old" "$shm/new"
    head -c $((1 << 30)) /dev/urandom >"$shm/src/big"
    for i in $(seq 1 500); do head -c $((256 << 10)) /dev/urandom >"$shm/src/tree/f$i"; done
    cp "$shm/src/big" "$shm/old/pull"
    cp "$shm/src/big" "$shm/new/pull"
    # Both servers are anonymous and writable in the emulated side b, as before: a binary that
    # refuses that without a secret (issue 21) is told --allow-anonymous-writes.
    open_flag() { "$1" serve --help | grep -- --allow-anonymous-writes >/dev/null && echo --allow-anonymous-writes || true; }
    ip netns exec "$b" "$OLD" serve --no-path-db --root "$shm/old" --port 5311 $(open_flag "$OLD") >/dev/null 2>&1 &
    CP_PIDS+=($!)
    ip netns exec "$b" "$NEW" serve --no-path-db --root "$shm/new" --port 5312 $(open_flag "$NEW") >/dev/null 2>&1 &
    CP_PIDS+=($!)
    sleep 1
    # timed CASE TOOL OPTIONS CMD...: one line of the TSV; the command runs in side a.
    timed() {
        local case=$1 tool=$2 opts=$3 rep=$4; shift 4
        local t0 t1 rc=0 commit=$OLD_COMMIT bytes
        [ "$tool" = new ] && commit=$NEW_COMMIT
        t0=$(date +%s%N)
        /usr/bin/time -o "$out/cpu" -f "%U %S" ip netns exec "$a" "$@" >"$out/stdout" 2>"$out/stderr" || rc=$?
        t1=$(date +%s%N)
        [ "$rc" = 0 ] || { echo "  $case $tool failed ($rc): $(tail -1 "$out/stderr")" >&2; return; }
        bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("bytes", 0))' "$out/stdout" 2>/dev/null || echo 0)
        printf 'cp\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n' "$case" "$tool" "$commit" "$opts" "$rep" \
            "$(python3 -c "print(($t1 - $t0) / 1e9)")" "$bytes" "$(tail -1 "$out/cpu" | awk '{print $1 + $2}')" >>"$OUT_TSV"
        echo "cp $case rep $rep $tool: $(tail -1 "$OUT_TSV" | cut -f7) s" >&2
    }
    local rep t k tools=(old new) bin port dst
    for rep in $(seq 1 "$reps"); do
        for case in push_file pull_file push_tree; do
            k=$((rep % 2)); local order=("${tools[@]:$k}" "${tools[@]:0:$k}")
            for t in "${order[@]}"; do
                if [ "$t" = old ]; then bin=$OLD; port=5311; else bin=$NEW; port=5312; fi
                dst="$shm/$t"
                rm -rf "$dst/big" "$dst/tree" "$shm/got" "$out/db.sqlite"*
                case $case in
                    push_file) timed "$case" "$t" "cp --json --no-progress --path-db FRESH" "$rep" \
                        "$bin" cp --json --no-progress --path-db "$out/db.sqlite" -p "$port" "$shm/src/big" "$(remote_operand "$bin" "$peer" big)" ;;
                    pull_file) timed "$case" "$t" "cp --json --no-progress --path-db FRESH" "$rep" \
                        "$bin" cp --json --no-progress --path-db "$out/db.sqlite" -p "$port" "$(remote_operand "$bin" "$peer" pull)" "$shm/got" ;;
                    push_tree) timed "$case" "$t" "cp -r --json --no-progress --path-db FRESH" "$rep" \
                        "$bin" cp -r --json --no-progress --path-db "$out/db.sqlite" -p "$port" "$shm/src/tree" "$(remote_operand "$bin" "$peer" "")" ;;
                esac
            done
        done
    done
}

for part in "${PARTS[@]}"; do
    case $part in
        send) send_part ;;
        cp) cp_part ;;
        *) echo "unknown part: $part (send, cp)" >&2; exit 2 ;;
    esac
done
table
