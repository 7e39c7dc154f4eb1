#!/usr/bin/env bash
# A/B of 060886e (a rate measured beside another flow's queue is a lower bound, told to both
# ends) against d8d2187 (before it): bench/fair_vs_iperf3.sh through bench/fair_ab.sh, one
# repetition of every cell per binary per round, the binaries in turn, ROUNDS rounds. Raw
# rows: roundN-COMMIT.tsv here; the table: python3 bench/fair_ab_summary.py docs/bench/beside-queue-2026-12-07
# REVERSE=1 DIR=docs/bench/beside-queue-2026-12-07/pulls: the same with every transfer a pull.
# Usage: sudo NEW=BIN OLD=BIN [ROUNDS=3] [RTTS="25 100"] [REVERSE=1 DIR=FOLDER] docs/bench/beside-queue-2026-12-07/ab.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=${DIR:-docs/bench/beside-queue-2026-12-07} ROUNDS=${ROUNDS:-3} exec bash bench/fair_ab.sh
