"""What every table generator shares: the raw files, medians and spreads, summary targets."""
import csv
import os
import re
import statistics

ROOT = os.environ.get("BENCH_TABLES_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# The payload a 1500-byte MTU leaves of 1 Gbit/s (1448 of every 1500 bytes on the wire).
PAYLOAD_BPS = 1e9 * 1448 / 1500
CP_COLS = {"part", "case", "tool", "commit", "options", "rep", "seconds", "bytes", "cpu_s", "exit"}
SEND_COLS = {"part", "case", "tool", "commit", "options", "rep", "seconds", "bytes", "cpu_s",
             "bits_per_s"}


class Raw:
    """The runs of one raw file and the `# key: value` lines above its header."""

    def __init__(self, rel, need=CP_COLS):
        self.rel = rel
        self.meta = {}
        body = []
        with open(os.path.join(ROOT, rel), newline="") as f:
            for line in f:
                if line.startswith("#"):
                    m = re.match(r"#\s*([a-z_]+):\s*(.*)", line.rstrip("\n"))
                    if m:
                        self.meta[m.group(1)] = m.group(2)
                else:
                    body.append(line)
        self.rows = list(csv.DictReader(body, delimiter="\t"))
        if not self.rows or not need <= set(self.rows[0]):
            raise SystemExit(f"{rel}: not a raw file (need the columns {sorted(need)})")
        if "command" not in self.meta:
            raise SystemExit(f"{rel}: no '# command:' line naming what produced it")

    def ok(self, case, tool, part=None):
        return [r for r in self.rows if r["case"] == case and r["tool"] == tool
                and r.get("exit", "0") == "0" and (part is None or r["part"] == part)]

    def failed(self):
        return [f"{r['case']}/{r['tool']} rep {r['rep']}" for r in self.rows
                if r.get("exit", "0") != "0"]

    def commits(self, part=None):
        return sorted({r["commit"][:7] for r in self.rows
                       if r["commit"] not in ("", "-") and (part is None or r["part"] == part)})

    def source(self, part=None):
        """The sentence every generated table starts its story with."""
        command = self.meta.get(f"command_{part}", self.meta["command"])
        return (f"Raw runs: `{self.rel}` (commit {', '.join(self.commits(part))}), made by "
                f"`{command}`.")


def values(rows, col):
    return [float(r[col]) for r in rows if r.get(col) not in (None, "", "nan", "-")]


def median(rows, col):
    v = values(rows, col)
    return statistics.median(v) if v else float("nan")


def spread(rows, col, scale=1.0, fmt=".2f"):
    v = values(rows, col)
    return f"{min(v) * scale:{fmt}}-{max(v) * scale:{fmt}}" if v else "-"


def verdict(ok):
    return "yes" if ok else "**no**"


class Target:
    """One row of BENCHMARKS.md's summary, computed from a raw file."""

    def __init__(self, what, peer, target, measured, met, details):
        self.what, self.peer, self.target = what, peer, target
        self.measured, self.met, self.details = measured, met, details

    def line(self):
        met = "-" if self.met is None else verdict(self.met)
        return (f"| {self.what} | {self.peer} | {self.target} | {self.measured} | {met} | "
                f"{self.details} |")


def link(md):
    return f"[{os.path.basename(md)}]({os.path.relpath(md, 'docs')})"


def rng(vals, fmt=".3f"):
    lo, hi = min(vals), max(vals)
    return f"{lo:{fmt}}" if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}-{hi:{fmt}}"


def cell_name(r):
    return f"{r['rtt_ms']:g} ms x {r['streams']}"
