#!/usr/bin/env python3
"""A/B of binaries beside iperf3: the median Jain index per binary, order, cell and mode
from the raw files of bench/fair_vs_iperf3.sh (one *.tsv per binary, RAW=) in FOLDER,
over the settled window as the script takes it (the incumbent's seconds 5-9 against the
latecomer's 2-6), with tcptune's and iperf3's median Mbit/s: the tables of the A/B
folders under docs/bench (fair-reverse-2026-12-04, crowded-2026-12-05, ...).
Run: python3 bench/fair_ab_summary.py FOLDER"""
import csv, glob, os, statistics as st, sys
JOIN = 3
def jain(x, y):
    return (x + y) ** 2 / (2 * (x * x + y * y))
res = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1] if len(sys.argv) > 1 else '.', '*.tsv'))):
    rows = [r for r in csv.DictReader((l for l in open(f) if not l.startswith('#')), delimiter='\t')]
    commit = next(r['commit'] for r in rows if r['commit'] != '-')[:7]
    by = {}
    for r in rows:
        by.setdefault((r['part'], r['case'], r['tool'], r['rep']), {})[r['role']] = [float(x) for x in r['mbit_per_s'].split(',') if x]
    for (order, case, mode, rep), d in by.items():
        i = d['incumbent'][JOIN + 2:JOIN + 6]; l = d['latecomer'][2:6]
        if len(i) < 4 or len(l) < 4:
            continue
        tc = (sum(i) / 4) if order == 'tcptune-first' else (sum(l) / 4)
        ip = (sum(l) / 4) if order == 'tcptune-first' else (sum(i) / 4)
        res.setdefault((order, case, mode), {}).setdefault(commit, []).append((jain(sum(i) / 4, sum(l) / 4), tc, ip))
commits = sorted({c for v in res.values() for c in v})
print('| order | cell | mode | ' + ' | '.join(f'Jain {c} (tcptune / iperf3 Mbit/s)' for c in commits) + ' |')
print('|---|---|---|' + '---:|' * len(commits))
for (order, case, mode) in sorted(res):
    cells = []
    for c in commits:
        v = res[(order, case, mode)].get(c, [])
        if not v:
            cells.append('-'); continue
        cells.append(f"{st.median(x[0] for x in v):.3f} ({st.median(x[1] for x in v):.0f} / {st.median(x[2] for x in v):.0f}; {len(v)} runs)")
    print(f"| {order} | {case.replace('.', ' ')} | {mode} | " + ' | '.join(cells) + ' |')
