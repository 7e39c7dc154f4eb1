#!/usr/bin/env bash
# Issue 23's careful-resume target for tcptune's own downloads: 128 MiB on a known 200 ms /
# 1 Gbit/s path, pushed (`send`) and pulled (`send --reverse`, the server sends), against
# the physical limit (2 RTT of setup + 128 MiB at the link's 965 Mbit/s of payload + RTT/2).
# The server runs plain (`serve`) and with `serve --careful-resume` (the server gives a
# receiving client's streams their initial window through a route to it); both in the same
# run, interleaved.
#
# One `tcptune emu` path, side a the client, side b the servers (plain on port 5310,
# --careful-resume on 5311). Per server, two untimed sends (one each way) record the path
# first; then each repetition runs push and pull against both servers.
# Recorded per run: the client's wall seconds, bytes, CPU, and from its report whether
# careful resume was used (`resume`) and the initial windows it set.
#
# Writes bench/raw/resume.tsv (RAW=) and regenerates the tables with bench/tables.
# Needs root (namespaces, routes) and python3. About 1 minute with REPS=3.
#
# Usage: sudo [REPS=3] bench/resume_pull.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export REPS="${REPS:-3}"
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces, routes)" >&2; exit 5; }
if [ -z "${TCPTUNE_BIN:-}" ]; then
  cargo build --release --quiet --bin tcptune
  TCPTUNE_BIN="${CARGO_TARGET_DIR:-target}/release/tcptune"
fi
export TCPTUNE_BIN
exec python3 - <<'PY'
import json, os, resource, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, "bench")
from benchlib import Servers, commit_of, sh  # noqa: E402

signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
BIN = os.path.abspath(os.environ["TCPTUNE_BIN"])
REPS = int(os.environ["REPS"])
RAW = os.environ.get("RAW", "bench/raw/resume.tsv")
NAME = f"resume{os.getpid() % 10000}"
A, B = f"tt-{NAME}-a", f"tt-{NAME}-b"
PEER = "198.19.0.1"
MIB = 128
work = tempfile.mkdtemp(prefix="tcptune-resume-bench.")


servers = Servers(BIN, NAME)


def send(port, reverse, db):
    cmd = ["ip", "netns", "exec", A, BIN, "send", f"{PEER}:{port}", "-n", str(MIB), "--json",
           "--no-progress", "--path-db", db] + (["-R"] if reverse else [])
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    try:
        rep = json.loads(out)
    except ValueError:
        rep = {}
    resume = ((rep.get("start") or {}).get("tcptune") or {}).get("resume") or {}
    moved = ((rep.get("end") or {}).get("sum_received") or {}).get("bytes", 0)
    if p.returncode != 0:
        print(f"  failed ({p.returncode}): {' '.join(cmd)}: {err.decode()[-300:]}",
              file=sys.stderr)
    return wall, p.returncode, moved, resume, cpu


commit = commit_of(BIN)
load0 = open("/proc/loadavg").read().split()[:3]
rows = []
try:
    servers.down()
    r = sh(BIN, "emu", "up", NAME, "--rtt", "200ms", "--rate", "1gbit")
    if r.returncode != 0:
        sys.exit(f"emu up failed: {r.stderr.strip()}")
    cases = {"plain": (5310, []), "careful": (5311, ["--careful-resume"])}
    dbs = {}
    for case, (port, opts) in cases.items():
        servers.start(["ip", "netns", "exec", B, BIN, "serve", "--no-path-db", "--port",
                       str(port), *opts])
    time.sleep(1)
    for case, (port, _) in cases.items():
        dbs[case] = os.path.join(work, f"{case}.sqlite")
        for reverse in (False, True):
            send(port, reverse, dbs[case])
    for rep in range(1, REPS + 1):
        order = list(cases.items()) if rep % 2 else list(reversed(cases.items()))
        for case, (port, opts) in order:
            for way, reverse in (("push", False), ("pull", True)):
                wall, code, moved, resume, cpu = send(port, reverse, dbs[case])
                print(f"rep {rep} {case:8} {way} {wall:6.2f} s exit {code} resume "
                      f"{resume.get('used')}", file=sys.stderr)
                options = (f"send PEER -n {MIB}" + (" -R" if reverse else "") +
                           f" (known path; serve{' ' + ' '.join(opts) if opts else ''})")
                rows.append((way, case, "tcptune", commit, options, rep, wall,
                             moved if code == 0 else 0, cpu, code,
                             str(bool(resume.get("used"))).lower(),
                             resume.get("initcwnd_segs") or "", resume.get("initrwnd_segs") or ""))
finally:
    servers.down()
    shutil.rmtree(work, ignore_errors=True)
load1 = open("/proc/loadavg").read().split()[:3]
with open(RAW, "w") as f:
    f.write(f"# command: sudo REPS={REPS} bench/resume_pull.sh\n")
    f.write(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    f.write(f"# host: {os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs, tcptune "
            "emu at 200 ms / 1 Gbit/s, default buffer limits\n")
    f.write(f"# load: load average {' '.join(load0)} before and {' '.join(load1)} after\n")
    f.write("# seconds: the client command's wall clock; resume: careful resume used by the "
            "client; initcwnd/initrwnd: the initial windows its route gave, segments\n")
    f.write("part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\texit\tresume\t"
            "initcwnd\tinitrwnd\n")
    for (way, case, tool, c, options, rep, wall, moved, cpu, code, used, cw, rw) in rows:
        f.write(f"{way}\t{case}\t{tool}\t{c}\t{options}\t{rep}\t{wall:.3f}\t{moved}\t{cpu:.3f}\t{code}\t"
                f"{used}\t{cw}\t{rw}\n")
print(f"wrote {RAW}", file=sys.stderr)
r = subprocess.run([sys.executable, "bench/tables"])
sys.exit(r.returncode)
PY
