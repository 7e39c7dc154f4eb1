#!/usr/bin/env python3
"""The README's table from ab-*.tsv (the raw rows of ab.sh): medians and spreads per RTT,
workload and binary, and the new/base ratios of the medians. Run: python3 summary.py"""
import csv, glob, statistics as st

rows = []
for f in sorted(glob.glob('ab-*.tsv')):
    rows += list(csv.DictReader(open(f), delimiter='\t'))

def num(v):
    return None if v in ('-', '', None) else float(v)

def med(key, rtt, what, tool):
    vs = [num(r[key]) for r in rows if (r['rtt_ms'], r['what'], r['tool']) == (rtt, what, tool)]
    vs = [v for v in vs if v is not None]
    return (st.median(vs), min(vs), max(vs), len(vs)) if vs else None

def cell(m, digits=2):
    return '-' if m is None else f'{m[0]:.{digits}f} ({m[1]:.{digits}f}-{m[2]:.{digits}f})'

def ratio(a, b):
    return '-' if a is None or b is None else f'{a[0] / b[0]:.3f}'

commits = {r['tool']: r['commit'] for r in rows}
print(f"| RTT | workload | wall s, base {commits.get('base')} | wall s, new {commits.get('new')} | new/base | client CPU s, base | new | new/base | server CPU s, base | new | new/base | streams kept (new) | runs |")
print('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|')
for rtt in sorted({r['rtt_ms'] for r in rows}, key=float, reverse=True):
    for what in ('push', 'pull', 'send-R'):
        w = [med('wall_s', rtt, what, t) for t in ('base', 'new')]
        c = [med('client_cpu_s', rtt, what, t) for t in ('base', 'new')]
        s = [med('remote_cpu_s', rtt, what, t) for t in ('base', 'new')]
        kept = sorted({r['streams_kept'] for r in rows if (r['rtt_ms'], r['what'], r['tool']) == (rtt, what, 'new')})
        name = {'push': '`cp` 1 GiB pushed', 'pull': '`cp` 1 GiB pulled', 'send-R': '`send -R -n 1024`'}[what]
        print(f'| {rtt} ms | {name} | {cell(w[0])} | {cell(w[1])} | {ratio(w[1], w[0])} | {cell(c[0])} | {cell(c[1])} | {ratio(c[1], c[0])} | {cell(s[0], 3)} | {cell(s[1], 3)} | {ratio(s[1], s[0])} | {", ".join(kept)} | {w[1][3] if w[1] else 0} |')
