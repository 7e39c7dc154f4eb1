#!/usr/bin/env bash
# A/B of b422af8 (a handshake above the RTT the path database knows shows another flow's
# queue) against 4590f1d (before it): bench/fair_vs_iperf3.sh KNOWN=1, one repetition of the
# cells per binary per round, the binaries in turn, ROUNDS rounds. Raw rows:
# roundN-COMMIT.tsv here; the table: python3 bench/fair_ab_summary.py docs/bench/known-beside-2026-12-08
# Usage: sudo NEW=BIN OLD=BIN [ROUNDS=2] [START=1] [RTTS="25 100"] [STREAMS=4] docs/bench/known-beside-2026-12-08/ab.sh
# (START: the first round's number, so that later rounds add files instead of replacing them)
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=docs/bench/known-beside-2026-12-08
export RTTS=${RTTS:-25 100} STREAMS=${STREAMS:-4} KNOWN=1
for r in $(seq "${START:-1}" $(( ${START:-1} + ${ROUNDS:-2} - 1 ))); do
  for bin in "$NEW" "$OLD"; do
    c=$("$bin" --version | sed -n 's/.*commit \([0-9a-f]\{7\}\).*/\1/p')
    TCPTUNE_BIN="$bin" REPS=1 RAW="$DIR/round$r-$c.tsv" bash bench/fair_vs_iperf3.sh
  done
done
