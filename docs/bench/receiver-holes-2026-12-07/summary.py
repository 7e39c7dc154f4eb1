#!/usr/bin/env python3
"""Summarize this folder's raw rows (pulls.tsv, advise-*.tsv) as the README's tables:
medians with min-max, per binary and cell. Usage: python3 summary.py [FOLDER]"""
import csv, statistics, sys
from pathlib import Path

folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)


def rows(name):
    with open(folder / name) as f:
        return list(csv.DictReader((l for l in f if not l.startswith("#")), delimiter="\t"))


def span(xs, scale=1.0, fmt="{:.1f}"):
    xs = sorted(float(x) / scale for x in xs)
    m = statistics.median(xs)
    return f"{fmt.format(m)} ({fmt.format(xs[0])}-{fmt.format(xs[-1])})"


print("Pulls (send -R, path never seen): medians (min-max)\n")
print("| cell | binary | runs | in-band rate, Mbit/s | rounds | goodput, Mbit/s | wall, s | peak rcvbuf total, MB |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
p = rows("pulls.tsv")
for cell in dict.fromkeys((r["rtt"], r["rate"], r["mib"]) for r in p):
    for label in ("new", "old"):
        rs = [r for r in p if (r["rtt"], r["rate"], r["mib"]) == cell and r["label"] == label]
        if not rs:
            continue
        print(f"| {cell[0]} x {cell[1]}, {cell[2]} MiB | {label} {rs[0]['commit'][:7]} | {len(rs)} "
              f"| {span([r['in_band_bps'] for r in rs], 1e6)} | {span([r['rounds'] for r in rs], 1, '{:.0f}')} "
              f"| {span([r['goodput_bps'] for r in rs], 1e6)} | {span([r['wall_s'] for r in rs], 1, '{:.2f}')} "
              f"| {span([r['peak_rcvbuf_total'] for r in rs], 1e6)} |")

print("\nadvise across 50 ms x 200 Mbit/s (193 of goodput): medians (min-max)\n")
print("| host | direction | binary | runs | rate, Mbit/s | rounds |")
print("|---|---|---|---:|---:|---:|")
for name in ("advise-idle.tsv", "advise-loaded.tsv"):
    a = rows(name)
    for d in ("send", "receive"):
        for label in ("new", "old"):
            rs = [r for r in a if r["direction"] == d and r["label"] == label]
            if not rs:
                continue
            host = "loaded (CPU 0, 3 busy loops)" if rs[0]["loaded"] == "1" else "idle"
            print(f"| {host} | {d} | {label} {rs[0]['commit'][:7]} | {len(rs)} "
                  f"| {span([r['rate_bps'] for r in rs], 1e6)} | {span([r['rounds'] for r in rs], 1, '{:.0f}')} |")
