#!/usr/bin/env bash
# What one `tcptune watch` refresh costs with thousands of connections, against `ss -tin` and
# `ss -tinm` in the same rounds (results: docs/bench/watch_cost.md, generated; the method is in
# docs/bench/watch.md). Each run opens CONNS loopback connections (twice as many sockets) in
# a fresh network namespace, so only its own sockets are dumped, then times ROUNDS rounds of
# a full watch refresh (both inet_diag dumps, the tracker, sort, the table of every row),
# `ss -tin > /dev/null` and `ss -tinm > /dev/null`, alternating.
#
# Writes every round of every run to bench/raw/watch_cost.tsv (RAW=), then the tables with
# bench/tables.
#
# Usage: sudo bench/watch_cost.sh   (env: REPS=3 CONNS=5000 ROUNDS=21 RAW=bench/raw/watch_cost.tsv)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/emu_common.sh
. bench/emu_common.sh   # run_meta and what it reports (steal, wake-up lateness), not the emulator
REPS=${REPS:-3}
CONNS=${CONNS:-5000}
ROUNDS=${ROUNDS:-21}
RAW=${RAW:-bench/raw/watch_cost.tsv}
for t in ss ip python3 cargo; do
    command -v "$t" >/dev/null || { echo "missing: $t (iproute2, python3, a Rust toolchain)" >&2; exit 5; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (a network namespace of its own)" >&2; exit 5; }
cargo build --release -q -p tcptune-doctor --example watch_cost
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
NS="tt-wcost-$$"
rows=$(mktemp) round_rows=$(mktemp)
cleanup() { ip netns del "$NS" 2>/dev/null || true; rm -f "$rows" "$round_rows"; }
trap cleanup EXIT
# run_start's notes without its binary: this script runs the example, not tcptune.
RUN_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
RUN_STEAL=$(steal_mark)
RUN_WAKEUP=$(wakeup_late)
for rep in $(seq "$REPS"); do
    ip netns add "$NS"
    ip -n "$NS" link set lo up
    : >"$round_rows"
    exit=0
    WATCH_COST_TSV=$round_rows ip netns exec "$NS" target/release/examples/watch_cost \
        "$CONNS" "$ROUNDS" >&2 || exit=$?
    ip netns del "$NS"
    # round what wall_ms cpu_ms -> part case tool commit options rep round wall_ms cpu_ms exit
    awk -F'\t' -v c="$commit" -v n="$CONNS" -v k="$ROUNDS" -v r="$rep" -v e="$exit" 'BEGIN{OFS="\t"}
        {print "refresh", n " connections", $2, c, "watch_cost " n " " k, r, $1, $3, $4, e}' \
        "$round_rows" >>"$rows"
    echo "run $rep of $REPS done" >&2
done
{
    echo "# command: sudo REPS=$REPS CONNS=$CONNS ROUNDS=$ROUNDS bench/watch_cost.sh"
    run_meta
    echo "# ss: $(ss -V 2>&1 | head -1)"
    echo "# sockets: $((2 * CONNS))"
    printf 'part\tcase\ttool\tcommit\toptions\trep\tround\twall_ms\tcpu_ms\texit\n'
    cat "$rows"
} >"$RAW"
echo "wrote $RAW" >&2
python3 bench/tables >/dev/null && echo "wrote docs/bench/watch_cost.md (bench/tables)" >&2
