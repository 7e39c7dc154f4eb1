"""tcptune lab's per-run records (results.csv) reduced as the lab reduces them."""
import csv
import json
import os
import re
import statistics

from tablegen.common import PAYLOAD_BPS, ROOT, Target, cell_name, median, rng, spread

# ---- tcptune lab: results.csv (one row per run) ----------------------------------------------

LAB_RUNS = {
    "docs/bench/lab-2026-11-26": "sudo ./target/release/tcptune lab --plan bench/lab_auto.toml",
    "docs/bench/lab-2026-11-26-auto-mem":
        "sudo ./target/release/tcptune lab --plan bench/lab_auto_mem.toml",
    "docs/bench/known-2026-11-26/before-82e4978":
        "sudo ./target/release/tcptune lab --plan bench/lab_known.toml --out DIR",
    "docs/bench/known-2026-11-26/after-43e026a":
        "sudo ./target/release/tcptune lab --plan bench/lab_known.toml --out DIR",
    "docs/bench/known-2026-11-26/merged-92212df":
        "sudo ./target/release/tcptune lab --plan bench/lab_known.toml --out DIR",
    "docs/bench/known-2026-11-29-careful":
        "sudo ./target/release/tcptune lab --plan bench/lab_known_careful.toml --out DIR",
    "docs/bench/lab-2026-11-28-auto8/committed-run1":
        "sudo ./target/release/tcptune lab --plan bench/lab_auto8.toml --out DIR",
    "docs/bench/lab-2026-11-28-auto8/committed-run2":
        "sudo ./target/release/tcptune lab --plan bench/lab_auto8.toml --out DIR",
    "docs/bench/lab-2026-11-29-auto-mem/before-25b7587":
        "sudo ./target/release/tcptune lab --plan bench/lab_auto_mem.toml --out DIR",
    "docs/bench/lab-2026-11-29-auto-mem/after-611c2e0":
        "sudo ./target/release/tcptune lab --plan bench/lab_auto_mem.toml --out DIR",
    "docs/bench/lab-2026-11-29-auto-mem/capped-222a231":
        "sudo ./target/release/tcptune lab --plan bench/lab_auto_mem.toml --out DIR",
    "docs/bench/lab-2026-11-29-auto-mem/auto8-222a231":
        "sudo ./target/release/tcptune lab --plan bench/lab_auto8.toml --out DIR",
}
# crates/lab/src/aggregate.rs: fixed sizes within 3% of the best median tie; the smallest wins.
IDEAL_TIE = 0.03


class Lab:
    """One lab run's per-run records, reduced as the lab reduces them (crates/lab/src/
    aggregate.rs and headline.rs), and checked against the summary.json it wrote."""

    def __init__(self, rel):
        self.rel = rel
        self.command = LAB_RUNS[rel]
        with open(os.path.join(ROOT, rel, "results.csv"), newline="") as f:
            runs = [r for r in csv.DictReader(f) if r["ok"] == "true" and not r["scenario"]]
        with open(os.path.join(ROOT, rel, "meta.json")) as f:
            meta = json.load(f)
        m = re.search(r"commit ([0-9a-f]+)", meta.get("tcptune_version", ""))
        self.commit = m.group(1)[:7] if m else "?"
        self.runs = runs
        self.rows = []
        keys = sorted({(float(r["rtt_ms"]), int(r["streams"]), r["path"]) for r in runs
                       if r["tune"] == "auto"}, key=lambda k: (k[2] != "new", k[0], k[1]))
        for rtt, n, path in keys:
            self.rows.append(self._row(rtt, n, path))
        self._check()

    def _cell(self, rtt, n, tune, host, path=None):
        return [r for r in self.runs if float(r["rtt_ms"]) == rtt and int(r["streams"]) == n
                and r["tune"] == tune and r["host"] == host and (path is None or r["path"] == path)]

    def _ideal(self, rtt, n):
        sizes = sorted({int(r["tune"].split(":")[1]) for r in self.runs
                        if r["tune"].startswith("fixed:") and r["host"] == "user_kernel"
                        and float(r["rtt_ms"]) == rtt and int(r["streams"]) == n})
        cands = [(b, self._cell(rtt, n, f"fixed:{b}", "user_kernel")) for b in sizes]
        if not cands:
            return None
        best = max(median(c, "throughput_bps") for _, c in cands)
        for b, c in cands:
            if median(c, "throughput_bps") >= best * (1 - IDEAL_TIE):
                return c
        return None

    def _row(self, rtt, n, path):
        auto = self._cell(rtt, n, "auto", "untuned", path)
        kernel = self._cell(rtt, n, "kernel", "untuned")
        ideal = self._ideal(rtt, n)
        size = int(auto[0]["bytes"])
        limit_s = 2 * rtt / 1e3 + size * 8 / PAYLOAD_BPS + rtt / 2e3
        bdp = 1e9 * rtt / 1e3 / 8
        peak = statistics.median(max(int(r["peak_sndbuf_bytes"]), int(r["peak_rcvbuf_bytes"]))
                                 for r in auto)
        row = {"rtt_ms": rtt, "streams": n, "path": path, "runs": len(auto),
               "auto": median(auto, "throughput_bps"), "auto_s": median(auto, "completion_s"),
               "auto_streams": median(auto, "streams_used"),
               "kernel": median(kernel, "throughput_bps") if kernel else None,
               "ideal": median(ideal, "throughput_bps") if ideal else None,
               "limit_s": limit_s, "limit_bps": size * 8 / limit_s, "mem_bdp": peak / 2 / bdp,
               "auto_spread": spread(auto, "throughput_bps", 1e-6, ".0f")}
        row["of_limit"] = limit_s / row["auto_s"]
        row["over_kernel"] = row["auto"] / row["kernel"] if kernel else None
        row["over_ideal"] = row["auto"] / row["ideal"] if ideal else None
        return row

    def _check(self):
        with open(os.path.join(ROOT, self.rel, "summary.json")) as f:
            lab = {(h["rtt_ms"], h["streams"], h["path"]): h for h in json.load(f)["headline"]["rows"]}
        for row in self.rows:
            h = lab.get((row["rtt_ms"], row["streams"], row["path"]))
            pairs = [("auto_over_ideal", row["over_ideal"]), ("auto_over_kernel", row["over_kernel"]),
                     ("auto_of_limit", row["of_limit"]), ("auto_mem_bdp", row["mem_bdp"])]
            for key, mine in pairs:
                theirs = h.get(key) if h else None
                if (theirs is None) != (mine is None) or (
                        mine is not None and abs(mine - theirs) > 1e-6 * max(1.0, abs(theirs))):
                    raise SystemExit(f"{self.rel}: {key} at {row['rtt_ms']} ms x {row['streams']} "
                                     f"({row['path']}) is {mine} from results.csv but {theirs} in "
                                     "summary.json")

    def source(self):
        return (f"Raw runs: `{self.rel}/results.csv` ({len(self.runs)} runs, binary of commit "
                f"{self.commit}), made by `{self.command}`.")

    def table(self, paths=("new", "known")):
        out = [self.source() + " Mbit/s from the command's start to the last byte at the "
               "receiver, medians (auto's spread min-max; streams actually used); `ideal` is the "
               "best fixed size of the sweep, `limit` the physical limit. Generated by "
               "`bench/tables` (and checked against the lab's own summary.json).", "",
               "| RTT ms | P | path | auto | auto spread | ideal | kernel | limit | auto/ideal "
               "| auto/kernel | auto/limit | time / limit | mem/BDP | runs |",
               "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

        def f(v, fmt):
            return "-" if v is None else format(v, fmt)
        for r in self.rows:
            if r["path"] not in paths:
                continue
            out.append(f"| {r['rtt_ms']:g} | {r['streams']} | {r['path']} | {r['auto'] / 1e6:.0f} "
                       f"({r['auto_streams']:g}) | {r['auto_spread']} | "
                       f"{f(r['ideal'] and r['ideal'] / 1e6, '.0f')} | "
                       f"{f(r['kernel'] and r['kernel'] / 1e6, '.0f')} | {r['limit_bps'] / 1e6:.0f} | "
                       f"{f(r['over_ideal'], '.3f')} | {f(r['over_kernel'], '.3f')} | "
                       f"{r['of_limit']:.3f} | {1 / r['of_limit']:.3f} x | {r['mem_bdp']:.2f} | "
                       f"{r['runs']} |")
        return "\n".join(out)


def lab_targets():
    """BENCHMARKS.md's summary rows from the lab's per-run records, and the lab's tables."""
    targets, regions = [], {}
    inband = Lab("docs/bench/lab-2026-11-26")
    anchor = ("[lab 2026-11-26](#in-band-measurement-final-code-2026-11-26) from "
              f"`{inband.rel}/results.csv`")
    new = [r for r in inband.rows if r["path"] == "new"]
    v = [r["over_ideal"] for r in new]
    targets.append(Target(
        "`auto` vs `ideal`, from the command's start, in-band measurement on a path never seen "
        f"(bench/lab_auto.toml, {len(new)} rows of 0.5-200 ms x 1/4/8 streams, "
        f"{min(r['runs'] for r in new)} reps)", "best fixed buffer (sweep), same run", ">= 0.95",
        f"**{rng(v)}** (lowest {cell_name(min(new, key=lambda r: r['over_ideal']))}; commit "
        f"{inband.commit})", min(v) >= 0.95, anchor))
    late = [r for r in new if r["over_kernel"] < 1.0]
    targets.append(Target(
        "`auto` vs kernel autotuning (default limits), from the command's start, path never seen",
        "same run", "not later (throughput ratio >= 1)",
        f"**{rng([r['over_kernel'] for r in new])}**; later on {len(late)} of {len(new)} rows: "
        + ", ".join(f"{cell_name(r)} {r['over_kernel']:.3f}" for r in late), not late, anchor))
    far = [r for r in new if r["rtt_ms"] >= 25]
    targets.append(Target(
        "`auto` peak memory with in-band measurement, path never seen, 25-200 ms (0.5 ms: "
        f"{rng([r['mem_bdp'] for r in new if r['rtt_ms'] < 25], '.1f')} x a 62.5 kB BDP, kernel "
        "autotuning's floor)", "2 x BDP (setsockopt units)", "<= 2",
        f"**{rng([r['mem_bdp'] for r in far], '.2f')}**", max(r["mem_bdp"] for r in far) <= 2,
        anchor))
    mem = Lab("docs/bench/lab-2026-11-26-auto-mem")
    targets.append(Target(
        "same, after the auto-mem rule (bench/lab_auto_mem.toml, 25/100 ms x 1/8 streams, "
        f"{min(r['runs'] for r in mem.rows)} reps)", "2 x BDP (setsockopt units)", "<= 2",
        f"**{rng([r['mem_bdp'] for r in mem.rows], '.2f')}** (commit {mem.commit})",
        max(r["mem_bdp"] for r in mem.rows) <= 2,
        "[auto-mem](#in-band-measurements-memory-on-a-new-path-2026-11-26) from "
        f"`{mem.rel}/results.csv`"))
    for name in ("before-25b7587", "after-611c2e0", "capped-222a231"):
        lab = Lab(f"docs/bench/lab-2026-11-29-auto-mem/{name}")
        parts = []
        for rtt in sorted({r["rtt_ms"] for r in lab.rows}):
            parts.append(f"{rtt:g} ms: " + ", ".join(
                f"{r['mem_bdp']:.2f} (x{r['streams']})" for r in lab.rows if r["rtt_ms"] == rtt))
        targets.append(Target(
            f"`auto` memory on a new path, re-run {name} (bench/lab_auto_mem.toml, 25/100 ms x "
            f"1/8 streams, {min(r['runs'] for r in lab.rows)} reps; the larger end)",
            "2 x BDP (setsockopt units)", "<= 2",
            "**" + "; ".join(parts) + f"** (commit {lab.commit})",
            max(r["mem_bdp"] for r in lab.rows) <= 2,
            f"[auto-mem 2026-11-29](lab-2026-11-29-auto-mem/README.md) from "
            f"`{lab.rel}/results.csv`"))
    bound = {100.0: 1.3, 200.0: 1.5}
    known = {}
    for name in ("before-82e4978", "after-43e026a", "merged-92212df"):
        lab = known[name] = Lab(f"docs/bench/known-2026-11-26/{name}")
        if name == "before-82e4978":
            continue
        rows = [r for r in lab.rows if r["path"] == "known"]
        parts, ok = [], True
        for rtt, b in bound.items():
            x = [1 / r["of_limit"] for r in rows if r["rtt_ms"] == rtt]
            ok = ok and max(x) <= b
            parts.append(f"**{rng(x)} x** at {rtt:g} ms")
        newx = [1 / r["of_limit"] for r in lab.rows if r["path"] == "new"]
        targets.append(Target(
            f"`auto` on a known path vs the physical limit, 128 MiB, 1/4 streams (bench/"
            f"lab_known.toml, run {name}, {min(r['runs'] for r in rows)} reps)", "physical limit",
            "<= 1.3 x at 100 ms, <= 1.5 x at 200 ms",
            ", ".join(parts) + f" (commit {lab.commit}); a path never seen, same run: "
            f"{rng(newx)} x", ok, "[known paths](#known-paths-vs-the-physical-limit-2026-11-26) from "
            f"`{lab.rel}/results.csv`"))
    careful_dir = "docs/bench/known-2026-11-29-careful"
    if os.path.exists(os.path.join(ROOT, careful_dir, "results.csv")):
        lab = known["careful"] = Lab(careful_dir)
        rows = [r for r in lab.rows if r["path"] == "known"]
        parts, ok = [], True
        for rtt in (100.0, 200.0):
            x = [1 / r["of_limit"] for r in rows if r["rtt_ms"] == rtt]
            ok = ok and bool(x) and max(x) <= 1.2
            parts.append(f"**{rng(x)} x** at {rtt:g} ms")
        newx = [1 / r["of_limit"] for r in lab.rows if r["path"] == "new"]
        targets.append(Target(
            "`auto` on a known path vs the physical limit, 128 MiB pushed, 1/4 streams, the "
            "servers with `serve --careful-resume` (bench/lab_known_careful.toml, "
            f"{min(r['runs'] for r in rows)} reps)", "physical limit",
            "<= 1.2 x at 100 and 200 ms (issue 22)",
            ", ".join(parts) + f" (commit {lab.commit}); a path never seen, same run: "
            f"{rng(newx)} x", ok, f"[known, careful]({careful_dir.split('/', 1)[1]}/README.md) "
            f"from `{lab.rel}/results.csv`"))
        new100 = [r["of_limit"] for r in lab.rows if r["path"] == "new" and r["rtt_ms"] == 100.0]
        targets.append(Target(
            "`auto` on a path never seen at 100 ms, 128 MiB pushed, 1/4 streams, the same run "
            "(servers with `serve --careful-resume`)", "physical limit",
            "auto/limit >= 0.75 (issue 22)",
            f"**{rng(new100, '.3f')}** (commit {lab.commit}; by estimate, 8 streams slow-starting "
            "from 10 segments each need about 7 round trips to fill the 12.5 MB BDP)", bool(new100) and min(new100) >= 0.75,
            f"[known, careful]({careful_dir.split('/', 1)[1]}/README.md) from "
            f"`{lab.rel}/results.csv`"))
    for name in ("lab-2026-11-28-auto8/committed-run1", "lab-2026-11-28-auto8/committed-run2",
                 "lab-2026-11-29-auto-mem/auto8-222a231"):
        lab = Lab(f"docs/bench/{name}")
        rows = [r for r in lab.rows if r["path"] == "new"]
        targets.append(Target(
            "`auto` vs kernel autotuning with 8 streams, path never seen, 100/200 ms, after the "
            f"receiver-window rule (bench/lab_auto8.toml, {name.split('/')[-1]}, {min(r['runs'] for r in rows)} "
            "reps)", "same run", "not later (throughput ratio >= 1)",
            ", ".join(f"**{r['over_kernel']:.3f}** at {r['rtt_ms']:g} ms" for r in rows)
            + f" (commit {lab.commit}; mem/BDP {rng([r['mem_bdp'] for r in rows], '.2f')})",
            min(r["over_kernel"] for r in rows) >= 1.0,
            f"[auto8]({name.split('/')[0]}/README.md) from `{lab.rel}/results.csv`"))
    regions["BENCHMARKS"] = {
        "lab-inband": inband.table(),
        "lab-auto-mem": mem.table(),
        "lab-known": known["after-43e026a"].table(("known", "new")),
    }
    regions["README"] = {name: lab.table() for name, lab in known.items() if name != "careful"}
    if "careful" in known:
        lab = known["careful"]
        regions["CAREFUL"] = "\n".join([
            "# Known paths with the server's careful resume (2026-11-29)", "",
            f"`{lab.command}` (commit {lab.commit}): bench/lab_known.toml's cells (128 MiB "
            "pushed at 100 and 200 ms / 1 Gbit/s, 1 and 4 streams asked, `auto` on a known and a "
            "new path, kernel autotuning beside), the servers started with `serve "
            "--careful-resume`: every connection is offered a 4 MiB receive window from its "
            "SYN-ACK on, which a known path's first burst needs (Linux offers 64 KiB and grows "
            "it about threefold per round trip); kernel autotuning's pushes get it too. Per-run "
            "records: `results.csv`. Generated by `bench/tables`.", "",
            lab.table(("known", "new")), ""])
    return targets, regions
