#!/usr/bin/env bash
# Issue 22, item 3, the half about flows tcptune does not control: is `auto` more aggressive
# than kernel autotuning against someone else's TCP flows?
#
# Across `tcptune emu` at RTTS (default 25 and 100 ms) and 1 Gbit/s, under this host's default
# buffer limits (no sysctl changed), with N = 1 and 4 streams, two orders:
#   iperf3 first:  iperf3 -c PEER -P N -t 12 -J runs; 3 s later
#                  tcptune send PEER -P N -t 6 --tune MODE --json --no-path-db joins it;
#   tcptune first: the same send, -t 12, runs; 3 s later iperf3 -P N -t 6 joins it.
# MODE is `auto` (what is judged) and `kernel` (the same engine with kernel autotuning: the
# reference a kernel flow would be). Each transfer's per-second rates come from its own JSON
# (`intervals[].sum.bits_per_second`, the same field in both tools). Jain's index of the two
# transfers is taken over the settled window: the latecomer's seconds 2-6 against the
# incumbent's seconds 5-9 (the same wall-clock seconds). Target: the index with `auto` at
# least the index with `kernel` in the same cell, by the median of REPS repetitions.
# Cells run interleaved: every repetition runs every cell, mode and order once.
# KNOWN=1: the same on a known path. Before the cells at each RTT, one `send -P 4 -t 6` alone
# records the path in a database of the run (auto, default options); every tcptune client then
# starts from a fresh copy of that database (`--path-db COPY` instead of `--no-path-db`), so
# a run's own result (measured beside iperf3) never becomes the next run's starting point.
#
# Writes bench/raw/fair_vs_iperf3.tsv (KNOWN=1: bench/raw/fair_vs_iperf3_known.tsv; RAW=) and
# regenerates the tables with bench/tables.
# Needs root (network namespaces), iperf3, python3; about 12 minutes with REPS=3.
#
# REVERSE=1: every transfer a pull (`iperf3 -R`, `send -R`: the servers in side b send);
# needs RAW= (no table is generated from it).
#
# DUMP=DIR: also keep every client's JSON there (one file per client run, named by RTT, streams,
# order, mode, repetition and tool), to diagnose a row.
#
# Usage: sudo [REPS=3] [RTTS="25 100"] [STREAMS="1 4"] [KNOWN=1] [REVERSE=1 RAW=FILE] bench/fair_vs_iperf3.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export REPS="${REPS:-3}" RTTS="${RTTS:-25 100}" STREAMS="${STREAMS:-1 4}" KNOWN="${KNOWN:-0}"
export REVERSE="${REVERSE:-0}"
if [ "$REVERSE" = 1 ] && [ -z "${RAW:-}" ]; then
  echo "REVERSE=1 needs RAW=FILE (no committed table is generated from pulls)" >&2; exit 2
fi
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces)" >&2; exit 5; }
command -v iperf3 >/dev/null 2>&1 || { echo "iperf3 is needed (apt-get install iperf3)" >&2; exit 5; }
if [ -z "${TCPTUNE_BIN:-}" ]; then
  cargo build --release -p tcptune >&2
  TCPTUNE_BIN="${CARGO_TARGET_DIR:-target}/release/tcptune"
fi
export TCPTUNE_BIN
exec python3 - <<'PY'
import json, os, shutil, sqlite3, subprocess, sys, tempfile, threading, time

sys.path.insert(0, "bench")
from benchlib import commit_of, sh  # noqa: E402

BIN = os.environ["TCPTUNE_BIN"]
REPS = int(os.environ["REPS"])
RTTS = [int(x) for x in os.environ["RTTS"].split()]
STREAMS = [int(x) for x in os.environ["STREAMS"].split()]
KNOWN = os.environ["KNOWN"] == "1"
REV = ["-R"] if os.environ.get("REVERSE") == "1" else []
DEFAULT_RAW = "bench/raw/fair_vs_iperf3_known.tsv" if KNOWN else "bench/raw/fair_vs_iperf3.tsv"
RAW = os.environ.get("RAW", DEFAULT_RAW)
# KNOWN: the database one solo send warmed (per RTT), and the copy each run starts from.
DBDIR = tempfile.mkdtemp(prefix="fairip-db-")
WARM, RUNDB = os.path.join(DBDIR, "warm.sqlite"), os.path.join(DBDIR, "run.sqlite")
WARM_SECS, WARM_STREAMS = 6, 4
NAME = f"fairip{os.getpid() % 10000}"
A, B, PEER = f"tt-{NAME}-a", f"tt-{NAME}-b", "198.19.0.1"
LONG, SHORT, JOIN = 12, 6, 3


servers = []


def down():
    for p in servers:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
    servers.clear()
    sh(BIN, "emu", "down", NAME)


def up(rtt):
    down()
    r = sh(BIN, "emu", "up", NAME, "--rtt", f"{rtt}ms", "--rate", "1gbit")
    if r.returncode != 0:
        sys.exit(f"emu up failed: {r.stderr.strip()}")
    for cmd in (["iperf3", "-s"], [BIN, "serve", "--no-path-db"]):
        servers.append(subprocess.Popen(["ip", "netns", "exec", B] + cmd,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)


def warm(rtt):
    """KNOWN: one send alone records the path (at this RTT) in the run's database."""
    for f in os.listdir(DBDIR):
        os.remove(os.path.join(DBDIR, f))
    r = sh("ip", "netns", "exec", A, BIN, "send", PEER, "-P", str(WARM_STREAMS), "-t",
           str(WARM_SECS), "--json", "--path-db", WARM)
    if r.returncode != 0:
        sys.exit(f"warming the path database at {rtt} ms failed: {r.stderr.strip()[:300]}")
    print(f"{rtt} ms: path recorded by one send -P {WARM_STREAMS} -t {WARM_SECS} alone",
          file=sys.stderr)


def fresh_db():
    """KNOWN: the run's database, a fresh copy of the warmed one."""
    for f in (RUNDB, RUNDB + "-wal", RUNDB + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    src, dst = sqlite3.connect(WARM), sqlite3.connect(RUNDB)
    with dst:
        src.backup(dst)
    src.close()
    dst.close()


def client(tool, n, secs):
    if tool == "iperf3":
        return ["iperf3", "-c", PEER, "-P", str(n), "-t", str(secs), "-J"] + REV
    db = ["--no-path-db"]
    if KNOWN:
        fresh_db()
        db = ["--path-db", RUNDB]
    return [BIN, "send", PEER, "-P", str(n), "-t", str(secs), "--tune", tool, "--json"] + db + REV


def options(tool, n, secs):
    if tool == "iperf3":
        return f"iperf3 -c PEER -P {n} -t {secs} -J" + (" -R" if REV else "")
    db = (f"--path-db COPY (of one send -P {WARM_STREAMS} -t {WARM_SECS} alone)" if KNOWN
          else "--no-path-db")
    return f"send PEER -P {n} -t {secs} --tune {tool} --json {db}" + (" -R" if REV else "")


def start(cmd):
    """Start a client in side a; a thread reads its output and reaps it with its own rusage."""
    p = subprocess.Popen(["ip", "netns", "exec", A] + cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    box = {"t0": time.monotonic()}

    def reap():
        box["out"], box["err"] = p.stdout.read(), p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        box["wall"] = time.monotonic() - box["t0"]
        box["code"] = os.waitstatus_to_exitcode(status)
        box["cpu"] = ru.ru_utime + ru.ru_stime
        p.returncode = box["code"]
    box["thread"] = threading.Thread(target=reap)
    box["thread"].start()
    return box


def series(out):
    """Per-second Mbit/s of a tool's JSON, and the bytes it moved."""
    doc = json.loads(out)
    rates = [iv["sum"]["bits_per_second"] / 1e6 for iv in doc["intervals"]]
    end = doc["end"]
    got = end.get("sum_received", end.get("sum", {})).get("bytes", 0)
    return rates, int(got)


DUMP = os.environ.get("DUMP", "")
if DUMP:
    os.makedirs(DUMP, exist_ok=True)


def dump(label, tool, out):
    """DUMP: keep a client's JSON as DUMP/LABEL-TOOL.json."""
    if DUMP:
        with open(os.path.join(DUMP, f"{label}-{tool}.json"), "w") as f:
            f.write(out or "")


def pair(first, second, n, label=""):
    """Run `first` for LONG s, `second` for SHORT s from JOIN s in; both results."""
    a = start(client(first, n, LONG))
    time.sleep(JOIN)
    b = start(client(second, n, SHORT))
    res = []
    for tool, secs, box in ((first, LONG, a), (second, SHORT, b)):
        box["thread"].join()
        dump(label, tool, box.get("out"))
        rates, got, code = [], 0, box["code"]
        try:
            rates, got = series(box["out"])
        except (ValueError, KeyError, TypeError):
            code = code or 99
        if code != 0:
            print(f"{tool} failed ({code}): {box['err'].strip()[:300]}", file=sys.stderr)
        res.append({"tool": tool, "secs": secs, "wall": box["wall"], "bytes": got,
                    "rates": rates, "exit": code, "cpu": box["cpu"]})
    return res


def jain(x, y):
    return (x + y) ** 2 / (2 * (x * x + y * y)) if x or y else float("nan")


def settled(inc, late):
    i, l = inc["rates"][JOIN + 2:JOIN + 6], late["rates"][2:6]
    if len(i) < 4 or len(l) < 4:
        return float("nan")
    return jain(sum(i) / 4, sum(l) / 4)


commit = commit_of(BIN)
rows = []
load0 = open("/proc/loadavg").read().split()[:3]
try:
    for rtt in RTTS:
        up(rtt)
        if KNOWN:
            warm(rtt)
        for rep in range(1, REPS + 1):
            for n in STREAMS:
                runs = [(o, m) for o in ("iperf3-first", "tcptune-first") for m in ("auto", "kernel")]
                k = (rep - 1) % len(runs)
                for order, mode in runs[k:] + runs[:k]:
                    first, second = ("iperf3", mode) if order == "iperf3-first" else (mode, "iperf3")
                    inc, late = pair(first, second, n, f"{rtt}ms-P{n}-{order}-{mode}-{rep}")
                    j = settled(inc, late)
                    print(f"{rtt} ms P{n} rep {rep} {order:13} {mode:6} Jain {j:.3f}  "
                          f"incumbent {sum(inc['rates'][JOIN + 2:JOIN + 6]) / 4:6.0f} "
                          f"latecomer {sum(late['rates'][2:6]) / 4:6.0f} Mbit/s", file=sys.stderr)
                    for role, r in (("incumbent", inc), ("latecomer", late)):
                        rows.append((order, f"{rtt}ms.P{n}", mode, role, rep, r))
finally:
    down()
    shutil.rmtree(DBDIR, ignore_errors=True)
load1 = open("/proc/loadavg").read().split()[:3]
iperf_version = sh("iperf3", "--version").stdout.split()[1]
with open(RAW, "w") as f:
    f.write(f"# command: sudo REPS={REPS}{' KNOWN=1' if KNOWN else ''}{' REVERSE=1' if REV else ''} bench/fair_vs_iperf3.sh"
            + (f" (RTTS=\"{' '.join(map(str, RTTS))}\")" if RTTS != [25, 100] else "")
            + (f" (STREAMS=\"{' '.join(map(str, STREAMS))}\")" if STREAMS != [1, 4] else "") + "\n")
    f.write(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    f.write(f"# host: {os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs, "
            f"iperf3 {iperf_version}, tcptune emu at 1 Gbit/s, default buffer limits\n")
    f.write(f"# load: load average {' '.join(load0)} before and {' '.join(load1)} after\n")
    f.write("# the tool column is the tcptune mode of the pair; `who` says which transfer the row "
            "is (iperf3 or tcptune); cpu_s is that client's user+system CPU (its rusage)\n")
    f.write("part\tcase\ttool\twho\trole\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\t"
            "bits_per_s\texit\tmbit_per_s\n")
    for order, case, mode, role, rep, r in rows:
        who = r["tool"] if r["tool"] == "iperf3" else "tcptune"
        c = "-" if who == "iperf3" else commit
        bps = r["bytes"] * 8 / r["wall"] if r["wall"] else 0
        f.write(f"{order}\t{case}\t{mode}\t{who}\t{role}\t{c}\t{options(r['tool'], int(case.split('P')[1]), r['secs'])}\t"
                f"{rep}\t{r['wall']:.3f}\t{r['bytes']}\t{r['cpu']:.3f}\t{bps:.0f}\t{r['exit']}\t"
                + ",".join(f"{x:.1f}" for x in r["rates"]) + "\n")
print(f"wrote {RAW}", file=sys.stderr)
if os.path.abspath(RAW) == os.path.abspath(DEFAULT_RAW):
    sys.exit(subprocess.run([sys.executable, "bench/tables"]).returncode)
PY
