#!/usr/bin/env bash
# Issue 23's target for an unmodified program on a known long path: 128 MiB to a known
# 200 ms / 1 Gbit/s path with `iperf3 -n 128M` under `tcptune agent exec` (the agent's
# initial window and pacing from the path database) no slower than `tcptune send -n 128` on
# the same known path by more than 15%.
#
# One `tcptune emu` path at 200 ms / 1 Gbit/s, default buffer limits; side a runs the
# clients, side b `tcptune serve --path-db B.db` (plain: no --careful-resume) and the
# `iperf3 -s` servers. The warm-up is one `tcptune send PEER -n 512` (512 MiB: long enough
# at 200 ms for the full-pipe estimator to see the pipe full, which the agent's initial
# window needs): side a's database (A.db) gets the entry of the path to side b, and side b's
# serve records what it measured of its client's path (a receive entry), as a server
# records every client's; that entry is imported into B.db once the warm-up ends, so that
# every run's server agent starts from the same entry. Each repetition runs, interleaved:
#   tcptune     tcptune send (known path: careful resume on its side) to the plain serve;
#   plain       iperf3 plain, to a plain `iperf3 -s`;
#   enforce     iperf3 under `agent exec` (enforce), to the plain `iperf3 -s`;
#   raise       the same under `agent exec --raise-limits`;
#   both        iperf3 under `agent exec`, to an `iperf3 -s` run under
#               `agent exec --path-db B.db` (its listener offers the known client a large
#               first window; a stranger would get 64 KiB);
#   both_raise  both with `--raise-limits`: the server's agent is started for the run and
#               stopped after it (the limits are global on this host: left raised, they
#               would change the other cases), with a journal of its own.
# and, to say where the time goes (part "setup"), what each client costs with (almost) no
# data: `tcptune send -n 1 -l 1K`, `iperf3 -n 1K` (plain) and `agent exec -- true`.
# Seconds are the client command's wall clock (agent exec's start included; the server's
# agent is started before the clock runs); cpu_s its user+system CPU (rusage).
#
# Writes bench/raw/agent_resume.tsv (RAW=) and regenerates the tables with bench/tables.
# Needs root (namespaces, BPF, routes), iperf3, python3, clang and libbpf-dev. About 5
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
SERVE_DB = os.path.join(work, "serve.db")
DB_B = os.path.join(work, "b.db")
servers = Servers(BIN, NAME)
# Each server agent keeps its own journal of raised limits (the client's agent has the
# default one): two agents on one host cannot share one.
SERVER_ENV = dict(os.environ, TCPTUNE_AGENT_JOURNAL=os.path.join(work, "server-limits.json"))
PORT_PLAIN, PORT_BOTH, PORT_BOTH_RAISE = 5201, 5202, 5203


def a(*cmd):
    return ["ip", "netns", "exec", A, *cmd]


def b(*cmd):
    return ["ip", "netns", "exec", B, *cmd]


def agent(*opts, db=DB):
    # `agent exec` runs outside the namespaces (their /sys has no cgroup2): CMD enters one.
    return [BIN, "agent", "exec", "--path-db", db, *opts, "--"]


def listening(port, timeout=10.0):
    """Wait until something in side b listens on port."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if sh(*b("ss", "-ltnH", f"sport = :{port}")).stdout.strip():
            return True
        time.sleep(0.05)
    return False


class RaisedServer:
    """`iperf3 -s` under `agent exec --raise-limits` for one run: started (and listening,
    the limits raised) before the client's clock runs, stopped after it (the agent passes
    SIGTERM on to iperf3, detaches and restores the limits)."""

    def __enter__(self):
        self.log = open(os.path.join(work, "server-raise.log"), "a")
        self.p = subprocess.Popen(
            agent("--raise-limits", db=DB_B) + b("iperf3", "-s", "-p", str(PORT_BOTH_RAISE)),
            stdout=subprocess.DEVNULL, stderr=self.log, env=SERVER_ENV)
        if not listening(PORT_BOTH_RAISE):
            raise SystemExit("the server under agent exec --raise-limits did not listen")
        return self

    def __exit__(self, *exc):
        self.p.terminate()
        try:
            self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()
        return False


class Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def limits():
    return "/".join(open(f"/proc/sys/net/core/{k}").read().strip()
                    for k in ("wmem_max", "rmem_max"))


def load1():
    return float(open("/proc/loadavg").read().split()[0])


commit = commit_of(BIN)
load0 = open("/proc/loadavg").read().split()[:3]
limits0 = limits()
rows = []
loads = []
entry, entry_b = [], []
try:
    servers.down()
    r = sh(BIN, "emu", "up", NAME, "--rtt", "200ms", "--rate", "1gbit")
    if r.returncode != 0:
        sys.exit(f"emu up failed: {r.stderr.strip()}")
    servers.start(b(BIN, "serve", "--path-db", SERVE_DB), cwd=work)
    servers.start(b("iperf3", "-s", "-p", str(PORT_PLAIN)), cwd=work)
    time.sleep(1)
    r = sh(*a(BIN, "send", PEER, "-n", "512", "--path-db", DB))
    if r.returncode != 0:
        sys.exit(f"tcptune send failed: {r.stderr.strip()[-300:]}")
    # serve records its client's path once the session ends; take a copy of it then.
    until = time.monotonic() + 10
    while '"peer"' not in sh(BIN, "paths", "--path-db", SERVE_DB, "--json").stdout:
        if time.monotonic() > until:
            sys.exit("tcptune serve recorded no path for its client")
        time.sleep(0.1)
    r = sh(BIN, "paths", "import", SERVE_DB, "--path-db", DB_B)
    if r.returncode != 0:
        sys.exit(f"paths import failed: {r.stderr.strip()}")
    entry = sh(BIN, "paths", "--path-db", DB).stdout.strip().splitlines()[-2:]
    entry_b = sh(BIN, "paths", "--path-db", DB_B).stdout.strip().splitlines()[-2:]
    print("the entries:", *entry, *entry_b, sep="\n  ", file=sys.stderr)
    # The server under the agent with the host's limits stays up for the whole run.
    servers.start(agent(db=DB_B) + b("iperf3", "-s", "-p", str(PORT_BOTH)), cwd=work,
                  env=SERVER_ENV)
    if not listening(PORT_BOTH):
        sys.exit("the server under agent exec did not listen")

    def ip(port):
        return a("iperf3", "-c", PEER, "-p", str(port), "-n", f"{MIB}M")

    cases = [
        ("tcptune", "tcptune send PEER -n 128 (known path)", "tcptune", Nothing,
         a(BIN, "send", PEER, "-n", str(MIB), "--path-db", DB, "--no-progress")),
        ("plain", "iperf3 -c PEER -n 128M", "iperf3", Nothing, ip(PORT_PLAIN)),
        ("enforce", "agent exec -- iperf3 -c PEER -n 128M", "tcptune agent", Nothing,
         agent() + ip(PORT_PLAIN)),
        ("raise", "agent exec --raise-limits -- iperf3 -c PEER -n 128M", "tcptune agent",
         Nothing, agent("--raise-limits") + ip(PORT_PLAIN)),
        ("both", "agent exec -- iperf3 -c PEER -n 128M; server: agent exec --path-db B.db "
         "-- iperf3 -s", "tcptune agent", Nothing, agent() + ip(PORT_BOTH)),
        ("both_raise", "agent exec --raise-limits -- iperf3 -c PEER -n 128M; server: agent "
         "exec --raise-limits --path-db B.db -- iperf3 -s", "tcptune agent", RaisedServer,
         agent("--raise-limits") + ip(PORT_BOTH_RAISE)),
    ]
    cases = [("resume", MIB << 20, *c) for c in cases] + [
        ("setup", 1 << 10, "tcptune_1k", "tcptune send PEER -n 1 -l 1K (known path)", "tcptune",
         Nothing, a(BIN, "send", PEER, "-n", "1", "-l", "1K", "--path-db", DB, "--no-progress")),
        ("setup", 1 << 10, "iperf3_1k", "iperf3 -c PEER -n 1K", "iperf3", Nothing,
         a("iperf3", "-c", PEER, "-p", str(PORT_PLAIN), "-n", "1K")),
        ("setup", 0, "agent_true", "agent exec -- true", "tcptune agent", Nothing,
         agent() + ["true"]),
    ]
    for rep in range(1, REPS + 1):
        k = (rep - 1) % len(cases)
        for part, size, case, options, tool, around, cmd in cases[k:] + cases[:k]:
            with around():
                loads.append(load1())
                wall, code, cpu = timed(cmd)
            print(f"rep {rep} {case:10} {wall:6.2f} s exit {code}", file=sys.stderr)
            rows.append((part, case, tool, options, rep, wall, size if code == 0 else 0, cpu,
                         code))
finally:
    servers.down()
    shutil.rmtree(work, ignore_errors=True)
load1_ = open("/proc/loadavg").read().split()[:3]
limits1 = limits()
with open(RAW, "w") as f:
    f.write("# command: sudo REPS=%d bench/agent_resume.sh\n" % REPS)
    f.write(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    f.write(f"# host: {os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs, "
            f"iperf3 {sh('iperf3', '--version').stdout.split()[1]}, tcptune emu at 200 ms / "
            "1 Gbit/s, default buffer limits\n")
    f.write(f"# load: load average {' '.join(load0)} before and {' '.join(load1_)} after, the "
            f"1-minute load {min(loads):.2f}-{max(loads):.2f} at the runs' starts\n")
    f.write(f"# limits: net.core.wmem_max/rmem_max {limits0} before and {limits1} after\n")
    f.write(f"# entry: {' / '.join(' '.join(e.split()) for e in entry)}\n")
    f.write(f"# entry_b: {' / '.join(' '.join(e.split()) for e in entry_b)}\n")
    f.write("# seconds: the client command's wall clock; cpu_s: its user+system CPU (rusage, the "
            "agent's own included when it wraps the client)\n")
    f.write("part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\texit\n")
    for part, case, tool, options, rep, wall, got, cpu, code in rows:
        f.write(f"{part}\t{case}\t{tool}\t{commit}\t{options}\t{rep}\t{wall:.3f}\t{got}\t"
                f"{cpu:.3f}\t{code}\n")
print(f"wrote {RAW}", file=sys.stderr)
if limits1 != limits0:
    print(f"warning: the limits were {limits0} before and are {limits1} now", file=sys.stderr)
if os.path.abspath(RAW) == os.path.abspath("bench/raw/agent_resume.tsv"):
    sys.exit(subprocess.run([sys.executable, "bench/tables"]).returncode)
PY
