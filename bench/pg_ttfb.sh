#!/usr/bin/env bash
# Issue 24's time-to-first-byte target: a transfer on a 100 ms path whose path database is a
# PostgreSQL server 10 ms away, against the same transfer without a database. The lookup runs
# beside the handshake and may add at most a quarter of the path's RTT.
#
# One `tcptune emu` topology: side b's first address (198.19.0.1, `tcptune serve
# --no-path-db`) 100 ms / 1 Gbit/s from side a, its second (198.19.0.2, a throw-away
# PostgreSQL cluster run as uid 65534, trust authentication for side a only, no TLS) 10 ms
# away. One `send` with the database records the path first (a known path is what the lookup
# finds); then each repetition runs, in alternating order:
#   nodb: tcptune send PEER -n 32 --json --no-path-db
#   pg:   tcptune send PEER -n 32 --json --path-db postgres://tt@198.19.0.2:PORT/postgres?sslmode=disable
#   pgnew: the same with a database created just before the run, schema and no entry (the
#          lookup's cost alone: nothing is found, the transfer runs as on a path never seen,
#          as nodb does)
# Recorded per run: the client's wall seconds, bytes, CPU, and from its report the round
# trips of the path from the command's start to the first data byte (`setup_round_trips`)
# and where the path's figures came from (`measurement_source`: path_db for a hit).
#
# Writes bench/raw/pg_ttfb.tsv (RAW=) and regenerates the tables with bench/tables.
# Needs root (namespaces), python3 and PostgreSQL's initdb/postgres (Debian package
# postgresql). About 2 minutes with REPS=7.
#
# Usage: sudo [REPS=7] bench/pg_ttfb.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export REPS="${REPS:-7}"
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces)" >&2; exit 5; }
if [ -z "${TCPTUNE_BIN:-}" ]; then
  cargo build --release --quiet --bin tcptune
  TCPTUNE_BIN="${CARGO_TARGET_DIR:-target}/release/tcptune"
fi
export TCPTUNE_BIN
exec python3 - <<'PY'
import glob, json, os, resource, shutil, subprocess, sys, tempfile, time

BIN = os.environ["TCPTUNE_BIN"]
REPS = int(os.environ["REPS"])
RAW = os.environ.get("RAW", "bench/raw/pg_ttfb.tsv")
NAME = f"pgttfb{os.getpid() % 10000}"
A, B, PEER, DB_ADDR, PORT = f"tt-{NAME}-a", f"tt-{NAME}-b", "198.19.0.1", "198.19.0.2", 5433
URL = f"postgres://tt@{DB_ADDR}:{PORT}/postgres?sslmode=disable&connect_timeout=5"
FRESH = f"postgres://tt@{DB_ADDR}:{PORT}/fresh?sslmode=disable&connect_timeout=5"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
MIB = 32


def sh(*cmd, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True, **kw)


bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
if not bins:
    sys.exit("needs initdb/postgres (Debian package postgresql)")
PGBIN = os.path.dirname(bins[-1])
ver = sh(BIN, "--version").stdout
COMMIT = ver.split("commit ", 1)[1].split(")")[0].split()[0] if "commit " in ver else "unknown"
load0 = open("/proc/loadavg").read().split()[:3]

tmp = tempfile.mkdtemp(prefix="tcptune-pgttfb-")
os.chmod(tmp, 0o755)
os.chown(tmp, 65534, 65534)
data = os.path.join(tmp, "data")
pg = None
server = None
try:
    r = sh(*NOBODY, f"{PGBIN}/initdb", "-D", data, "-U", "tt", "--auth=trust", "-E", "UTF8",
           "--no-sync", "--no-instructions")
    if r.returncode != 0:
        sys.exit(f"initdb failed: {r.stderr.strip()[:300]}")
    with open(os.path.join(data, "pg_hba.conf"), "a") as f:
        f.write("host all tt 198.18.0.1/32 trust\n")
    sh(BIN, "emu", "down", NAME)
    r = sh(BIN, "emu", "up", NAME, "--rtt", "100ms", "--rate", "1gbit",
           "--extra-path", "rtt=10ms,rate=1gbit")
    if r.returncode != 0:
        sys.exit(f"emu up failed: {r.stderr.strip()}")
    pg = subprocess.Popen(["ip", "netns", "exec", B] + NOBODY +
                          [f"{PGBIN}/postgres", "-D", data, "-k", tmp, "-p", str(PORT),
                           "-c", f"listen_addresses={DB_ADDR}", "-c", "fsync=off"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = subprocess.Popen(["ip", "netns", "exec", B, BIN, "serve", "--no-path-db"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if sh("ip", "netns", "exec", A, f"{PGBIN}/pg_isready", "-h", DB_ADDR, "-p",
              str(PORT)).returncode == 0:
            break
        time.sleep(0.2)
    else:
        sys.exit("PostgreSQL did not come up in side b")
    time.sleep(0.5)

    def fresh_db():
        for sql in ("DROP DATABASE IF EXISTS fresh", "CREATE DATABASE fresh"):
            r = sh("ip", "netns", "exec", B, *NOBODY, f"{PGBIN}/psql", "-h", tmp, "-p",
                   str(PORT), "-U", "tt", "-d", "postgres", "-qc", sql)
            if r.returncode != 0:
                sys.exit(f"{sql}: {r.stderr.strip()[:300]}")
        # Its schema, as any database a fleet uses has: the run measures the lookup alone.
        r = sh("ip", "netns", "exec", A, BIN, "paths", "--path-db", FRESH, "--json")
        if r.returncode != 0:
            sys.exit(f"creating the empty database's schema: {r.stderr.strip()[:300]}")

    def send(case):
        if case == "pgnew":
            fresh_db()
        db = {"nodb": ["--no-path-db"], "pg": ["--path-db", URL],
              "pgnew": ["--path-db", FRESH]}[case]
        cmd = [BIN, "send", PEER, "-n", str(MIB), "--json"] + db
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p = subprocess.Popen(["ip", "netns", "exec", A] + cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        out, err = p.communicate()
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        row = {"exit": p.returncode, "seconds": wall, "bytes": 0, "setup_rt": None,
               "source": "", "cpu": cpu, "err": err.strip().splitlines()[-1:]}
        try:
            doc = json.loads(out)
            tt = doc["end"]["tcptune"]
            row["bytes"] = doc["end"]["sum_received"]["bytes"]
            row["setup_rt"] = tt.get("setup_round_trips")
            row["source"] = (doc["start"]["tcptune"].get("measurement") or {}).get(
                "source") or ""
        except (ValueError, KeyError, TypeError):
            row["exit"] = row["exit"] or 99
        opts = " ".join(["send PEER", "-n", str(MIB), "--json"] +
                        {"nodb": ["--no-path-db"], "pg": ["--path-db", "URL"],
                         "pgnew": ["--path-db", "URL_OF_AN_EMPTY_DATABASE"]}[case])
        return row, opts

    prime, _ = send("pg")
    if prime["exit"] != 0:
        sys.exit(f"the first send with the database failed: {prime['err']}")
    listed = sh("ip", "netns", "exec", A, BIN, "paths", "--path-db", URL, "--json")
    if listed.returncode != 0 or PEER not in listed.stdout:
        sys.exit(f"the database holds no entry for {PEER} after the first send: "
                 f"{listed.stderr.strip()[:300]}")
    rows = []
    for rep in range(1, REPS + 1):
        order = ("nodb", "pg", "pgnew") if rep % 2 else ("pgnew", "pg", "nodb")
        for case in order:
            r, opts = send(case)
            rows.append((case, opts, rep, r))
            print(f"rep {rep} {case:4} exit {r['exit']} {r['seconds']:.3f} s, "
                  f"setup {r['setup_rt']} RTT, source {r['source'] or '-'}", file=sys.stderr)
finally:
    for p in (server, pg):
        if p is not None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    sh(BIN, "emu", "down", NAME)
    shutil.rmtree(tmp, ignore_errors=True)

load1 = open("/proc/loadavg").read().split()[:3]
uname = os.uname()
os.makedirs(os.path.dirname(RAW) or ".", exist_ok=True)
with open(RAW, "w") as f:
    f.write(f"# command: sudo REPS={REPS} bench/pg_ttfb.sh\n")
    f.write(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    f.write(f"# host: {uname.sysname} {uname.release}, {os.cpu_count()} CPUs, PostgreSQL "
            f"{os.path.basename(os.path.dirname(PGBIN))}, tcptune emu: the server 100 ms / "
            f"1 Gbit/s away, the database 10 ms / 1 Gbit/s away\n")
    f.write(f"# load: load average {' '.join(load0)} before and {' '.join(load1)} after\n")
    f.write("# seconds: the client command's wall clock; setup_rt: round trips of the path "
            "from the command's start to the first data byte (the report's "
            "setup_round_trips); source: where the path's figures came from\n")
    f.write("\t".join(["part", "case", "tool", "commit", "options", "rep", "seconds", "bytes",
                       "cpu_s", "exit", "setup_rt", "source"]) + "\n")
    for case, opts, rep, r in rows:
        f.write("\t".join(str(x) for x in [
            "ttfb", case, "tcptune", COMMIT, opts, rep, f"{r['seconds']:.3f}", r["bytes"],
            f"{r['cpu']:.3f}", r["exit"], r["setup_rt"] if r["setup_rt"] is not None else "", r["source"]])
            + "\n")
print(f"wrote {RAW}", file=sys.stderr)
if os.path.abspath(RAW) == os.path.abspath("bench/raw/pg_ttfb.tsv"):
    subprocess.run(["bench/tables"], check=True)
PY
