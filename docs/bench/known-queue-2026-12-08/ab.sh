#!/usr/bin/env bash
# A/B of a5b3302 (a handshake lengthened past the path database's RTT buckets by another
# flow's queue finds the entry of the RTT under it) against fa5c6bb (before it), on a known
# path (KNOWN=1), with bench/fair_ab.sh. Raw rows: roundN-COMMIT.tsv here; the table:
# python3 bench/fair_ab_summary.py docs/bench/known-queue-2026-12-08
# What ran (2026-12-08): sudo NEW=BIN OLD=BIN DUMPDIR=/tmp/kq ROUNDS=4 RTTS=25 STREAMS="1 4" docs/bench/known-queue-2026-12-08/ab.sh
# Usage: sudo NEW=BIN OLD=BIN [DUMPDIR=DIR] [ROUNDS=2] [START=1] [RTTS="25 100"] [STREAMS=4] docs/bench/known-queue-2026-12-08/ab.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=docs/bench/known-queue-2026-12-08 KNOWN=1 RTTS=${RTTS:-25 100} STREAMS=${STREAMS:-4} \
  ROUNDS=${ROUNDS:-2} exec bash bench/fair_ab.sh
