#!/usr/bin/env python3
"""README's table from runs.tsv: per -P, the medians of the data time (first byte to last at
the receiver) and auto/limit counted as the lab counts, with 2 RTT (0.2 s) of setup before
the data (tcpdump of one run: the data left 0.206 s after the command started)."""
import csv, statistics as st
LIMIT, SETUP = 1.363, 0.2
rows = list(csv.DictReader(open('runs.tsv'), delimiter='\t'))
print('| -P | streams | data s, median (min-max) | auto/limit | retransmits, median |')
print('|---:|---:|---:|---:|---:|')
for p in ('1', '16', '32'):
    r = [x for x in rows if x['P'] == p]
    s = [float(x['seconds']) for x in r]
    m = st.median(s)
    rtx = st.median(int(x['retransmits']) for x in r)
    print(f"| {p} | {r[0]['streams_used']} | {m:.3f} ({min(s):.3f}-{max(s):.3f}) | {LIMIT / (m + SETUP):.3f} | {rtx:.0f} |")
