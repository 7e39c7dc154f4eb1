#!/usr/bin/env python3
"""Median Jain index per binary, order, cell and mode from the raw files of
bench/fair_vs_iperf3.sh (REVERSE=1) in this folder (one file per binary, reps 1-3 from three rounds), over the settled window as the script
takes it (the incumbent's seconds 5-9 against the latecomer's 2-6), with the latecomer's
and the incumbent's medians. Run: python3 summary.py"""
import csv, glob, statistics as st
JOIN = 3
def jain(x, y):
    return (x + y) ** 2 / (2 * (x * x + y * y))
res = {}
for f in sorted(glob.glob('*.tsv')):
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
