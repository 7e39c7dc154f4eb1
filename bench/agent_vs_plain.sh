#!/usr/bin/env bash
# Issue 23's targets: unmodified programs under `tcptune agent` against the same programs
# plain, across `tcptune emu` at 100 ms / 1 Gbit/s with this host's default buffer limits.
#
# Side a (198.18.0.1) runs the clients, side b (198.19.0.1) the servers. Each repetition runs
# every case once, interleaved:
#   iperf3_1g:   iperf3 -c PEER -n 1G, plain; under `agent exec` (enforce) with the path
#                database entry one `tcptune send PEER -n 256` recorded; the same with
#                --raise-limits; and under --mode advise (sets nothing);
#   iperf3_w64k: iperf3 -c PEER -w 64K -n 32M (an application that fixes its window), to a
#                plain `iperf3 -s`; and under `agent exec --override-app-buffers` to an
#                `iperf3 -s` of its own run under `agent exec --override-app-buffers` too
#                (iperf3 sends -w to its server, which fixes its receive buffer);
#   curl_1g:     curl downloading a 1 GiB file from `python3 -m http.server` in side b, a plain
#                server and one run under `agent exec` (the server is the sender; its entry
#                for side a is an operator's, `paths add 198.18.0.1/32 --rate 1gbit --rtt 100ms`,
#                since nothing in side b measured that direction).
# Seconds are wall clock of the client command (agent exec's start included), bytes what the
# client moved, cpu_s the client's user+system CPU (its rusage, the agent's included when it
# wraps the client).
#
# Writes bench/raw/agent.tsv (RAW=) and regenerates the tables with bench/tables.
# Needs root (namespaces, BPF), iperf3, curl, python3, clang and libbpf-dev (the agent's
# program). About 12 minutes with REPS=3.
#
# Usage: sudo [REPS=3] [CASES="iperf3_1g iperf3_w64k curl_1g"] bench/agent_vs_plain.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export REPS="${REPS:-3}" CASES="${CASES:-iperf3_1g iperf3_w64k curl_1g}"
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces, BPF)" >&2; exit 5; }
for p in iperf3 curl python3; do
  command -v "$p" >/dev/null 2>&1 || { echo "$p is needed (apt-get install $p)" >&2; exit 5; }
done
if [ -z "${TCPTUNE_BIN:-}" ]; then
  cargo build --release -p tcptune >&2
  TCPTUNE_BIN="${CARGO_TARGET_DIR:-target}/release/tcptune"
fi
export TCPTUNE_BIN
exec python3 - <<'PY'
import os, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, "bench")
from benchlib import Servers, commit_of, sh, timed  # noqa: E402

# A SIGTERM (or Ctrl-C) still tears the emulator and the servers down (the finally below).
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

BIN = os.path.abspath(os.environ["TCPTUNE_BIN"])
REPS = int(os.environ["REPS"])
CASES = os.environ["CASES"].split()
RAW = os.environ.get("RAW", "bench/raw/agent.tsv")
ALL_CASES = ["iperf3_1g", "iperf3_w64k", "curl_1g"]
# The raw file holds one run of every case: a run of some of them would drop the others' rows
# (and their summary targets), so it goes to a file of its own.
if os.path.abspath(RAW) == os.path.abspath("bench/raw/agent.tsv") and \
        sorted(CASES) != sorted(ALL_CASES):
    sys.exit(f"CASES={' '.join(CASES)} is not every case: bench/raw/agent.tsv would lose the "
             "others' rows; set RAW= to another file")
NAME = f"agentb{os.getpid() % 10000}"
A, B = f"tt-{NAME}-a", f"tt-{NAME}-b"
PEER, SELF = "198.19.0.1", "198.18.0.1"
GIB = 1 << 30
work = tempfile.mkdtemp(prefix="tcptune-agent-bench.")
os.chmod(work, 0o755)
DB_A = os.path.join(work, "a.db")   # side a's path database: what `send` recorded
DB_B = os.path.join(work, "b.db")   # side b's: the operator's entry for side a
FILE = os.path.join(work, "www", "1g.bin")


servers = Servers(BIN, NAME)


def serve(cmd):
    servers.start(cmd, cwd=work)


def down():
    servers.down()


def agent(*opts, db=DB_A):
    """`agent exec` runs outside the namespaces (`ip netns exec` mounts a /sys without the
    cgroup2 file system): its CMD enters one, and stays in the agent's cgroup."""
    return [BIN, "agent", "exec", "--path-db", db, *opts, "--"]


def a(*cmd):
    return ["ip", "netns", "exec", A, *cmd]


def b(*cmd):
    return ["ip", "netns", "exec", B, *cmd]


commit = commit_of(BIN)
load0 = open("/proc/loadavg").read().split()[:3]
rows = []
try:
    down()
    r = sh(BIN, "emu", "up", NAME, "--rtt", "100ms", "--rate", "1gbit")
    if r.returncode != 0:
        sys.exit(f"emu up failed: {r.stderr.strip()}")
    os.makedirs(os.path.dirname(FILE))
    with open(FILE, "wb") as f:
        f.truncate(GIB)
    # The path database entries: side a's from one tcptune transfer, side b's an operator's.
    serve(b(BIN, "serve", "--no-path-db"))
    time.sleep(1)
    r = sh("ip", "netns", "exec", A, BIN, "send", PEER, "-n", "256", "--path-db", DB_A)
    if r.returncode != 0:
        sys.exit(f"tcptune send failed: {r.stderr.strip()[-300:]}")
    r = sh(BIN, "paths", "add", f"{SELF}/32", "--rate", "1gbit", "--rtt", "100ms",
           "--path-db", DB_B)
    if r.returncode != 0:
        sys.exit(f"paths add failed: {r.stderr.strip()[-300:]}")
    entry = sh(BIN, "paths", "--path-db", DB_A).stdout.strip().splitlines()
    print("side a's entry:", *entry[-2:], sep="\n  ", file=sys.stderr)
    serve(b("iperf3", "-s", "-p", "5201"))
    serve(agent("--override-app-buffers", db=DB_B) + b("iperf3", "-s", "-p", "5202"))
    serve(b("python3", "-m", "http.server", "-d", os.path.dirname(FILE), "8000"))
    serve(agent(db=DB_B) + b("python3", "-m", "http.server", "-d", os.path.dirname(FILE),
                             "8001"))
    time.sleep(2)
    ip1g = a("iperf3", "-c", PEER, "-p", "5201", "-n", "1G")
    w64 = ["-c", PEER, "-w", "64K", "-n", "32M"]
    url = f"http://{PEER}:%d/1g.bin"
    curl = a("curl", "-sS", "-o", "/dev/null")
    plan = {
        "iperf3_1g": [
            ("plain", "iperf3 -c PEER -n 1G", ip1g, GIB),
            ("enforce", "agent exec -- iperf3 -c PEER -n 1G", agent() + ip1g, GIB),
            ("raise", "agent exec --raise-limits -- iperf3 -c PEER -n 1G",
             agent("--raise-limits") + ip1g, GIB),
            ("advise", "agent exec --mode advise -- iperf3 -c PEER -n 1G",
             agent("--mode", "advise") + ip1g, GIB),
        ],
        "iperf3_w64k": [
            ("plain", "iperf3 -c PEER -w 64K -n 32M (plain server)",
             a("iperf3", "-p", "5201", *w64), 32 << 20),
            ("override", "agent exec --override-app-buffers -- iperf3 -c PEER -w 64K -n 32M "
             "(server under agent exec --override-app-buffers)",
             agent("--override-app-buffers") + a("iperf3", "-p", "5202", *w64), 32 << 20),
        ],
        "curl_1g": [
            ("plain", "curl 1 GiB from python3 -m http.server (plain)", curl + [url % 8000], GIB),
            ("enforce", "curl 1 GiB from python3 -m http.server under agent exec",
             curl + [url % 8001], GIB),
        ],
    }
    for rep in range(1, REPS + 1):
        for part in CASES:
            cases = plan[part]
            k = (rep - 1) % len(cases)
            for case, options, cmd, size in cases[k:] + cases[:k]:
                wall, code, cpu = timed(cmd)
                got = size
                print(f"rep {rep} {part:11} {case:8} {wall:7.2f} s  "
                      f"{got * 8 / wall / 1e6:6.0f} Mbit/s  exit {code}", file=sys.stderr)
                tool = "tcptune agent" if case != "plain" else cmd[4]
                rows.append((part, case, tool, options, rep, wall, got if code == 0 else 0,
                             cpu, code))
finally:
    down()
    shutil.rmtree(work, ignore_errors=True)
load1 = open("/proc/loadavg").read().split()[:3]
with open(RAW, "w") as f:
    f.write(f"# command: sudo REPS={REPS} bench/agent_vs_plain.sh\n")
    f.write(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    f.write(f"# host: {os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs, "
            f"iperf3 {sh('iperf3', '--version').stdout.split()[1]}, tcptune emu at 100 ms / "
            "1 Gbit/s, default buffer limits\n")
    f.write(f"# load: load average {' '.join(load0)} before and {' '.join(load1)} after\n")
    f.write("# seconds: the client command's wall clock; cpu_s: its user+system CPU (rusage, the "
            "agent's own included when it wraps the client)\n")
    f.write("part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\texit\n")
    for part, case, tool, options, rep, wall, got, cpu, code in rows:
        f.write(f"{part}\t{case}\t{tool}\t{commit}\t{options}\t{rep}\t{wall:.3f}\t{got}\t"
                f"{cpu:.3f}\t{code}\n")
print(f"wrote {RAW}", file=sys.stderr)
if os.path.abspath(RAW) == os.path.abspath("bench/raw/agent.tsv"):
    sys.exit(subprocess.run([sys.executable, "bench/tables"]).returncode)
PY
