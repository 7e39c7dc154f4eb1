#!/usr/bin/env python3
"""Summarize competing-scenario lab runs (issue 22 item 3): per cell and run, the first and
second transfer's rates over the overlap, Jain's index over the overlap and over the settled
window (2-6 s after the latecomer started; absent from binaries before the lab recorded it),
and the two together over the overlap against the first alone before the second started.

Usage: bench/fair_summary.py LABEL=RUN_DIR [LABEL=RUN_DIR ...]"""
import json, sys
from collections import defaultdict

def rows(d):
    for line in open(f"{d}/results.jsonl"):
        r = json.loads(line)
        c = r.get("competing")
        if not c or not r.get("ok"):
            yield (r["rtt_us"] // 1000, r["streams"], r["tune"]), None
            continue
        ov = c["overlap_bps"]
        alone = c.get("alone_bps") or 0
        yield (r["rtt_us"] // 1000, r["streams"], r["tune"]), {
            "first": ov[0] / 1e6, "second": ov[1] / 1e6,
            "jain": c.get("jain_transfers"), "settled": c.get("jain_settled"),
            "sum_vs_alone": (ov[0] + ov[1]) / alone if alone else None,
        }

def f(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)

print("| run | RTT | streams | mode | first / second Mbit/s (overlap, each rep) | Jain overlap | Jain settled (2-6 s) | sum Mbit/s | sum / first's first 3 s |")
print("|---|---:|---:|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    label, d = arg.split("=", 1)
    cells = defaultdict(list)
    for k, v in rows(d):
        cells[k].append(v)
    for k in sorted(cells, key=lambda k: (k[0], k[1], k[2])):
        vs = cells[k]
        ok = [v for v in vs if v]
        print(f"| {label} | {k[0]} ms | {k[1]} | {k[2]} | "
              + ", ".join(f"{v['first']:.0f} / {v['second']:.0f}" for v in ok)
              + (f" ({len(vs)-len(ok)} failed)" if len(ok) < len(vs) else "")
              + " | " + ", ".join(f(v["jain"]) for v in ok)
              + " | " + ", ".join(f(v["settled"]) for v in ok)
              + " | " + ", ".join(f"{v['first'] + v['second']:.0f}" for v in ok)
              + " | " + ", ".join(f(v["sum_vs_alone"]) for v in ok) + " |")
