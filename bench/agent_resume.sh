#!/usr/bin/env bash
# Issue 23's target for an unmodified program on a known long path: 128 MiB to a known
# 200 ms / 1 Gbit/s path with `iperf3 -n 128M` under `tcptune agent exec` (the agent's
# initial window and pacing from the path database) no slower than `tcptune send -n 128` on
# the same known path by more than 15%.
#
# One `tcptune emu` path at 200 ms / 1 Gbit/s, default buffer limits; side a runs the
# clients, side b `tcptune serve` (plain) and `iperf3 -s`. The path database entry is what
# one `tcptune send PEER -n 512` records (512 MiB: long enough at 200 ms for the full-pipe
# estimator to see the pipe full, which the agent's initial window needs). Each repetition
# runs, interleaved: tcptune send (known path: careful resume on its side), iperf3 plain,
# iperf3 under `agent exec` (enforce), and under `agent exec --raise-limits`.
# Seconds are the client command's wall clock (agent exec's start included); cpu_s its
# user+system CPU (rusage).
#
# Writes bench/raw/agent_resume.tsv (RAW=) and regenerates the tables with bench/tables.
# Needs root (namespaces, BPF, routes), iperf3, python3, clang and libbpf-dev. About 2
# minutes with REPS=5.
#
# Usage: sudo [REPS=5] bench/agent_resume.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export REPS="${REPS:-5}"
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces, BPF)" >&2; exit 5; }
for p in iperf3 python3; do
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

signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

BIN = os.path.abspath(os.environ["TCPTUNE_BIN"])
REPS = int(os.environ["REPS"])
RAW = os.environ.get("RAW", "bench/raw/agent_resume.tsv")
NAME = f"agres{os.getpid() % 10000}"
A, B = f"tt-{NAME}-a", f"tt-{NAME}-b"
PEER = "198.19.0.1"
MIB = 128
work = tempfile.mkdtemp(prefix="tcptune-agent-resume.")
DB = os.path.join(work, "a.db")
servers = Servers(BIN, NAME)


def a(*cmd):
    return ["ip", "netns", "exec", A, *cmd]


def agent(*opts):
    # `agent exec` runs outside the namespaces (their /sys has no cgroup2): CMD enters one.
    return [BIN, "agent", "exec", "--path-db", DB, *opts, "--"]


commit = commit_of(BIN)
load0 = open("/proc/loadavg").read().split()[:3]
rows = []
entry = []
try:
    servers.down()
    r = sh(BIN, "emu", "up", NAME, "--rtt", "200ms", "--rate", "1gbit")
    if r.returncode != 0:
        sys.exit(f"emu up failed: {r.stderr.strip()}")
    servers.start(["ip", "netns", "exec", B, BIN, "serve", "--no-path-db"], cwd=work)
    servers.start(["ip", "netns", "exec", B, "iperf3", "-s", "-p", "5201"], cwd=work)
    time.sleep(1)
    r = sh(*a(BIN, "send", PEER, "-n", "512", "--path-db", DB))
    if r.returncode != 0:
        sys.exit(f"tcptune send failed: {r.stderr.strip()[-300:]}")
    entry = sh(BIN, "paths", "--path-db", DB).stdout.strip().splitlines()[-2:]
    print("the entry:", *entry, sep="\n  ", file=sys.stderr)
    ip = a("iperf3", "-c", PEER, "-p", "5201", "-n", f"{MIB}M")
    cases = [
        ("tcptune", "tcptune send PEER -n 128 (known path)", "tcptune",
         a(BIN, "send", PEER, "-n", str(MIB), "--path-db", DB, "--no-progress")),
        ("plain", "iperf3 -c PEER -n 128M", "iperf3", ip),
        ("enforce", "agent exec -- iperf3 -c PEER -n 128M", "tcptune agent", agent() + ip),
        ("raise", "agent exec --raise-limits -- iperf3 -c PEER -n 128M", "tcptune agent",
         agent("--raise-limits") + ip),
    ]
    for rep in range(1, REPS + 1):
        k = (rep - 1) % len(cases)
        for case, options, tool, cmd in cases[k:] + cases[:k]:
            wall, code, cpu = timed(cmd)
            print(f"rep {rep} {case:8} {wall:6.2f} s exit {code}", file=sys.stderr)
            rows.append((case, tool, options, rep, wall, (MIB << 20) if code == 0 else 0, cpu,
                         code))
finally:
    servers.down()
    shutil.rmtree(work, ignore_errors=True)
load1 = open("/proc/loadavg").read().split()[:3]
with open(RAW, "w") as f:
    f.write("# command: sudo REPS=%d bench/agent_resume.sh\n" % REPS)
    f.write(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    f.write(f"# host: {os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs, "
            f"iperf3 {sh('iperf3', '--version').stdout.split()[1]}, tcptune emu at 200 ms / "
            "1 Gbit/s, default buffer limits\n")
    f.write(f"# load: load average {' '.join(load0)} before and {' '.join(load1)} after\n")
    f.write(f"# entry: {' / '.join(' '.join(e.split()) for e in entry)}\n")
    f.write("# seconds: the client command's wall clock; cpu_s: its user+system CPU (rusage, the "
            "agent's own included when it wraps the client)\n")
    f.write("part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\texit\n")
    for case, tool, options, rep, wall, got, cpu, code in rows:
        f.write(f"resume\t{case}\t{tool}\t{commit}\t{options}\t{rep}\t{wall:.3f}\t{got}\t"
                f"{cpu:.3f}\t{code}\n")
print(f"wrote {RAW}", file=sys.stderr)
if os.path.abspath(RAW) == os.path.abspath("bench/raw/agent_resume.tsv"):
    sys.exit(subprocess.run([sys.executable, "bench/tables"]).returncode)
PY
