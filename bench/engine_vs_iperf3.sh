#!/usr/bin/env bash
# The plainest check of issue 22's item 1: tcptune's engine against iperf3 on loopback, the
# same 8 GiB moved by both, every byte verified by tcptune, the default tuning (auto).
#
# For N = 1 and 4 streams, REPS interleaved rounds; in each round every tool runs once, the
# order rotating from round to round:
#   iperf3 -c 127.0.0.1 -p PORT -P N -n 8G -J                  (against iperf3 -s)
#   tcptune send 127.0.0.1:PORT -P N -n 8192 --no-path-db --json (against tcptune serve)
#   and, with --before BIN, the same send with BIN against BIN's own serve.
# Nothing is pinned: the tools share the host's CPUs as a user's would. Per run: the client's
# wall seconds (from its start to its exit: the same clock for every tool), the bytes the
# receiver got (end.sum_received.bytes of each tool's JSON), the client's CPU (its rusage)
# and the server's (utime+stime from /proc over the run). Throughput = received bytes x 8 /
# client wall seconds; bits per CPU-second = received bytes x 8 / (client + server CPU).
# Writes bench/raw/engine_vs_iperf3.tsv (RAW=) and regenerates the tables with bench/tables.
#
# Usage: bench/engine_vs_iperf3.sh [--reps N] [--mib M] [--streams "1 4"] [--before BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=7
MIB=8192
STREAMS="1 4"
BEFORE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --mib) MIB="$2"; shift 2 ;;
    --streams) STREAMS="$2"; shift 2 ;;
    --before) BEFORE="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v iperf3 >/dev/null 2>&1 || { echo "iperf3 is needed (apt-get install iperf3)" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed for the statistics" >&2; exit 1; }
if [ -z "${TCPTUNE_BIN:-}" ]; then
  cargo build --release -p tcptune >&2
  TCPTUNE_BIN="${CARGO_TARGET_DIR:-target}/release/tcptune"
fi
export TCPTUNE_BIN REPS MIB STREAMS BEFORE
exec python3 - <<'PY'
import json, os, socket, subprocess, sys, time

BIN = os.environ["TCPTUNE_BIN"]
BEFORE = os.environ["BEFORE"]
REPS = int(os.environ["REPS"])
MIB = int(os.environ["MIB"])
STREAMS = [int(x) for x in os.environ["STREAMS"].split()]
RAW = os.environ.get("RAW", "bench/raw/engine_vs_iperf3.tsv")
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK  # utime + stime of every thread, dead ones too


def host_ticks():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v), v[3] + v[4], (v[7] if len(v) > 7 else 0)


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"server on port {port} did not come up")


def commit_of(binary):
    ver = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    return ver.split("commit ", 1)[1].split(")")[0].split()[0] if "commit " in ver else "unknown"


servers, tools = {}, {}
for name, binary in (("tcptune", BIN), ("before", BEFORE)):
    if not binary:
        continue
    port = free_port()
    servers[name] = (subprocess.Popen([binary, "serve", "--bind", "127.0.0.1", "--port", str(port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
    tools[name] = (binary, commit_of(binary))
port = free_port()
servers["iperf3"] = (subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
tools["iperf3"] = ("iperf3", "-")
for _, (_, p) in servers.items():
    wait_port(p)
time.sleep(0.3)


def options(tool, n):
    if tool == "iperf3":
        return f"iperf3 -c 127.0.0.1 -P {n} -n {MIB // 1024}G -J" if MIB % 1024 == 0 else \
            f"iperf3 -c 127.0.0.1 -P {n} -n {MIB}M -J"
    return f"send 127.0.0.1:PORT -P {n} -n {MIB} --no-path-db --json"


def command(tool, n):
    srv, port = servers[tool]
    if tool == "iperf3":
        size = f"{MIB // 1024}G" if MIB % 1024 == 0 else f"{MIB}M"
        return ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(n), "-n", size, "-J"], srv
    return [tools[tool][0], "send", f"127.0.0.1:{port}", "-P", str(n), "-n", str(MIB),
            "--no-path-db", "--json"], srv


def run(tool, n):
    cmd, srv = command(tool, n)
    s0 = proc_cpu(srv.pid)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    wall = time.monotonic() - t0
    # communicate() reaped it: its rusage is the children's delta, taken around the run.
    return p.returncode, out, err, wall, s0, srv


def measure(tool, n):
    r0 = os.times()
    code, out, err, wall, s0, srv = run(tool, n)
    r1 = os.times()
    time.sleep(0.2)  # the server's finishing thread and log line
    s1 = proc_cpu(srv.pid)
    client = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    got = 0
    try:
        got = int(json.loads(out)["end"]["sum_received"]["bytes"])
    except (ValueError, KeyError, TypeError):
        code = code or 99
    if code != 0:
        print(f"{tool} P{n} failed ({code}): {err.strip()[:300]}", file=sys.stderr)
    return {"seconds": wall, "bytes": got, "client": client, "server": s1 - s0, "exit": code}


load0 = open("/proc/loadavg").read().split()[:3]
h0 = host_ticks()
rows = []
names = list(tools)
for rep in range(REPS):
    for n in STREAMS:
        k = rep % len(names)
        order = names[k:] + names[:k]
        for tool in order:
            m = measure(tool, n)
            rows.append((n, tool, rep + 1, m))
            bps = m["bytes"] * 8 / m["seconds"] if m["seconds"] else 0
            cpu = m["client"] + m["server"]
            print(f"P{n} rep {rep + 1}/{REPS} {tool:8} {m['seconds']:6.2f} s {bps / 1e9:6.2f} Gbit/s "
                  f"cpu {m['client']:.2f}+{m['server']:.2f} s "
                  f"{(m['bytes'] * 8 / cpu / 1e9) if cpu else 0:6.2f} Gbit/CPU-s", file=sys.stderr)
h1 = host_ticks()
load1 = open("/proc/loadavg").read().split()[:3]
for srv, _ in servers.values():
    srv.terminate()
total = h1[0] - h0[0]
busy = 100.0 * (1 - (h1[1] - h0[1]) / total) if total else 0.0
steal = 100.0 * (h1[2] - h0[2]) / total if total else 0.0
iperf_version = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split()[1]
args = f"--reps {REPS}" + (f" --mib {MIB}" if MIB != 8192 else "") + \
    (f" --streams \"{' '.join(map(str, STREAMS))}\"" if STREAMS != [1, 4] else "") + \
    (" --before BIN" if BEFORE else "")
with open(RAW, "w") as f:
    f.write(f"# command: bench/engine_vs_iperf3.sh {args}\n")
    f.write(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    f.write(f"# host: {os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs, "
            f"iperf3 {iperf_version}, nothing pinned\n")
    f.write(f"# load: {busy:.0f}% of all CPUs busy on average (the benchmark included), steal "
            f"{steal:.1f}%, load average {' '.join(load0)} before and {' '.join(load1)} after\n")
    f.write("part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\tclient_cpu_s\t"
            "server_cpu_s\tbits_per_s\texit\n")
    for n, tool, rep, m in rows:
        bps = m["bytes"] * 8 / m["seconds"] if m["seconds"] else 0
        f.write(f"send\tP{n}\t{tool}\t{tools[tool][1]}\t{options(tool, n)}\t{rep}\t"
                f"{m['seconds']:.3f}\t{m['bytes']}\t{m['client'] + m['server']:.3f}\t"
                f"{m['client']:.3f}\t{m['server']:.3f}\t{bps:.0f}\t{m['exit']}\n")
print(f"wrote {RAW}", file=sys.stderr)
if os.path.abspath(RAW) == os.path.abspath("bench/raw/engine_vs_iperf3.tsv"):
    sys.exit(subprocess.run([sys.executable, "bench/tables"]).returncode)
PY
