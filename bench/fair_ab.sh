#!/usr/bin/env bash
# An interleaved A/B of two tcptune binaries on bench/fair_vs_iperf3.sh: ROUNDS rounds, in
# each one repetition of the cells (REPS=1) with NEW, then with OLD. Raw rows go to
# DIR/roundN-COMMIT.tsv (COMMIT: each binary's own, from --version), and with DUMPDIR every
# client's JSON to DUMPDIR/rN-COMMIT/. The table of medians:
#   python3 bench/fair_ab_summary.py DIR
# RTTS, STREAMS, KNOWN and REVERSE pass through to bench/fair_vs_iperf3.sh (its defaults).
# START: the first round's number, so that later rounds add files instead of replacing them.
# The experiments in docs/bench/*/ab.sh call this with their folder and cells.
#
# Usage: sudo NEW=BIN OLD=BIN DIR=FOLDER [ROUNDS=3] [START=1] [DUMPDIR=DIR] [RTTS=..]
#        [STREAMS=..] [KNOWN=1] [REVERSE=1] bench/fair_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${NEW:?NEW=BIN: the binary under test}" "${OLD:?OLD=BIN: the binary it is compared with}"
: "${DIR:?DIR=FOLDER: where the raw rounds go}"
mkdir -p "$DIR"
start=${START:-1}
for r in $(seq "$start" $((start + ${ROUNDS:-3} - 1))); do
  for bin in "$NEW" "$OLD"; do
    c=$("$bin" --version | sed -n 's/.*commit \([0-9a-f]\{7\}\).*/\1/p')
    TCPTUNE_BIN="$bin" REPS=1 RAW="$DIR/round$r-$c.tsv" DUMP="${DUMPDIR:+$DUMPDIR/r$r-$c}" \
      bash bench/fair_vs_iperf3.sh
  done
done
