#!/usr/bin/env bash
# A/B of b422af8 (a handshake above the RTT the path database knows shows another flow's
# queue) against 4590f1d (before it): bench/fair_vs_iperf3.sh KNOWN=1 through
# bench/fair_ab.sh, one repetition of the cells per binary per round, the binaries in turn,
# ROUNDS rounds. Raw rows: roundN-COMMIT.tsv here; the table:
# python3 bench/fair_ab_summary.py docs/bench/known-beside-2026-12-08
# Usage: sudo NEW=BIN OLD=BIN [ROUNDS=2] [START=1] [RTTS="25 100"] [STREAMS=4] docs/bench/known-beside-2026-12-08/ab.sh
# (START: the first round's number, so that later rounds add files instead of replacing them)
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=docs/bench/known-beside-2026-12-08 KNOWN=1 RTTS=${RTTS:-25 100} STREAMS=${STREAMS:-4} \
  ROUNDS=${ROUNDS:-2} exec bash bench/fair_ab.sh
