#!/usr/bin/env bash
# A/B of a5b3302 (a handshake lengthened past the path database's RTT buckets by another flow's
# queue finds the entry of the RTT under it) against fa5c6bb (before it):
# cells per binary per round, the binaries in turn, ROUNDS rounds, bench/fair_vs_iperf3.sh KNOWN=1. Raw rows:
# roundN-COMMIT.tsv here; the table: python3 bench/fair_ab_summary.py docs/bench/known-queue-2026-12-08
# Usage: sudo NEW=BIN OLD=BIN [DUMPDIR=DIR] [ROUNDS=2] [START=1] [RTTS="25 100"] [STREAMS=4] docs/bench/known-queue-2026-12-08/ab.sh
# (START: the first round's number, so that later rounds add files instead of replacing them)
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=docs/bench/known-queue-2026-12-08
export RTTS=${RTTS:-25 100} STREAMS=${STREAMS:-4} KNOWN=1
for r in $(seq "${START:-1}" $(( ${START:-1} + ${ROUNDS:-2} - 1 ))); do
  for bin in "$NEW" "$OLD"; do
    c=$("$bin" --version | sed -n 's/.*commit \([0-9a-f]\{7\}\).*/\1/p')
    TCPTUNE_BIN="$bin" REPS=1 RAW="$DIR/round$r-$c.tsv" DUMP="${DUMPDIR:+$DUMPDIR/r$r-$c}" bash bench/fair_vs_iperf3.sh
  done
done
