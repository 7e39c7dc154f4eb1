#!/usr/bin/env bash
# Issue 24's fleet benchmark: lookups in a path database of 1,048,576 stored paths (256 hosts
# x 4096, the core's bound per host), 16 clients at once, each on its own connection; the p50
# and p99 of one lookup, PostgreSQL (a throw-away cluster on a Unix socket) against the SQLite
# store on the same machine, REPS rounds of 16 x 2,000 lookups on each, interleaved.
#
# Writes bench/raw/fleet_lookup.tsv (RAW=) and regenerates the tables with bench/tables
# (docs/bench/fleet_lookup.md and its row of docs/BENCHMARKS.md). Needs PostgreSQL's server
# binaries (apt-get install postgresql); as root the cluster runs as uid 65534. About 10
# minutes on 2 cores with the full size; FLEET_HOSTS=16 makes it smaller (not for the table).
#
# Usage: [REPS=5] bench/fleet_lookup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-5}"
RAW="${RAW:-bench/raw/fleet_lookup.tsv}"
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 ||
  { echo "PostgreSQL's server is needed (apt-get install postgresql)" >&2; exit 5; }
cargo build --release --locked -p tcptune-pathdb --example fleet_lookup >&2
commit="$(git rev-parse --short=12 HEAD)"
git diff --quiet HEAD -- crates/pathdb crates/core || commit="$commit+"
pg="$(ls /usr/lib/postgresql/*/bin/postgres | head -1)"
tmp="$RAW.tmp.$$"
trap 'rm -f "$tmp"' EXIT
{
  echo "# command: REPS=$REPS bench/fleet_lookup.sh"
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# host: $(uname -sr), $(nproc) CPUs, $("$pg" --version), SQLite bundled by rusqlite"
  echo "# load_before: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  printf 'part\tcase\ttool\tcommit\toptions\trep\tpaths\tclients\tlookups\tp50_ms\tp99_ms\tfill_s\texit\n'
} >"$tmp"
FLEET_REPS="$REPS" FLEET_RAW="$tmp" FLEET_COMMIT="$commit" \
  "${CARGO_TARGET_DIR:-target}/release/examples/fleet_lookup"
echo "# load_after: load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$tmp"
mv "$tmp" "$RAW"
trap - EXIT
python3 bench/tables
