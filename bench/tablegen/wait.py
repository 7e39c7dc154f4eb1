"""bench/wait_vs_peers.sh's tables: docs/bench/wait.md and docs/bench/wait_NAME.md."""
import os

from tablegen.common import PAYLOAD_BPS, ROOT, Raw, Target, link, median, rng, spread

# Tool keys of wait_vs_peers.sh's cp part, in table order, with what each row is.
CP_NAMES = [
    ("new", "tcptune cp, path never seen"),
    ("known", "tcptune cp, known path"),
    ("ssh", "tcptune cp over ssh (-e ssh, far end serve --stdio), known path"),
    ("sshenc", "tcptune cp --encrypt over ssh (every block sealed), known path"),
    ("sshcm", "tcptune cp over an ssh connection already open (ControlMaster), known path"),
    ("sshtrue", "ssh HOST true (ssh's own setup, copies nothing)"),
    ("g1", "globus-url-copy -p 1"),
    ("g4", "globus-url-copy -p 4"),
    ("g8", "globus-url-copy -p 8"),
    ("gcc", "globus-url-copy -cc 8 -fast -p 4 (tree; the file: -fast -p 4)"),
    ("g4v", "globus-url-copy -p 4 -verify-checksum -checksum-alg SHA1 (integrity on)"),
    ("scp", "scp"),
    ("rsync", "rsync -a -W over ssh"),
]

# wait_vs_peers.sh's gridftp part (a download, the server sending).
DL_NAMES = [
    ("new", "tcptune auto, path never seen"),
    ("known", "tcptune auto, known path"),
    ("kernel8", "tcptune, kernel autotuning, 8 streams"),
    ("g1", "globus-url-copy -p 1"),
    ("g4", "globus-url-copy -p 4"),
    ("g8", "globus-url-copy -p 8"),
]

# The most client CPU a push may spend against GridFTP's (issue 22): BLAKE3 of every byte sent
# costs tcptune's client about 0.15-0.25 s per GiB here, which GridFTP's client does not spend.
PUSH_CPU_LIMIT = 1.5
# Why a push's CPU can stay above that limit, said beside the figure when it does. The
# profile: `perf record` of a 1 GiB `cp` push to a server on loopback at commit b089630 (the
# same code as the runs of 2026-11-29 12:00), 601 samples.
PULL_CPU_WHY = (
    "Why the pull's client CPU is above GridFTP's ({mine:.2f} s vs {gridftp:.2f} s): a profile "
    "of the same pull (perf, loopback, commit b613342, 1387 samples) puts 37% of the client's "
    "CPU in BLAKE3 (`_blake3_hash_many_avx512`, about 0.13 s per GiB), 16% in copying what "
    "arrives out of the socket and about 20% in writing it to tmpfs; GridFTP's client does "
    "the same receive copy and write and hashes nothing. What tcptune spends besides the hash "
    "is below GridFTP's whole client; the hash puts it above. Writing with splice() from the "
    "socket would save one of the two copies (about 0.05 s per GiB), not the hash: not done.")
PUSH_CPU_WHY = (
    "Why the push's client CPU is above 1.5 x GridFTP's ({mine:.2f} s vs {gridftp:.2f} s): a "
    "profile of the same push (perf, loopback, commit b089630) puts half of the client's CPU "
    "in BLAKE3 itself (`_blake3_hash_many_avx512`, about 0.15 s per GiB, the fastest kernel the "
    "crate has), the rest in the kernel (sendfile from the page cache 2-4%, mapping and "
    "unmapping the file's pages about 8%, freeing sent buffers 11%). GridFTP hashes nothing: "
    "on an idle host its whole client costs about 0.11 s per GiB, so the hash alone is 1.4 x "
    "that and 1.5 x cannot be reached while the client hashes every byte it sends. (Earlier "
    "runs on a loaded host measured 0.64 s against 0.44 s, 1.455 x: CPU seconds grow with the "
    "load for both tools, not equally.)")


def gopts(key):
    """A GridFTP run's options as the tables name them (g4 -> `-p 4`, gcc -> its best set)."""
    if key == "g4v":
        return "-p 4 -verify-checksum -checksum-alg SHA1"
    return "-cc 8 -fast -p 4" if key == "gcc" else f"-p {key[1:]}"


def wait_files():
    """Every bench/raw/wait_NAME.tsv (bench/wait_vs_peers.sh) -> docs/bench/wait_NAME.md."""
    raw_dir = os.path.join(ROOT, "bench", "raw")
    names = sorted(f for f in os.listdir(raw_dir) if f.startswith("wait_") and f.endswith(".tsv"))
    return {f"docs/bench/{n[:-4]}.md": f"bench/raw/{n}" for n in names}


# ---- wait_vs_peers.sh: cp tables ---------------------------------------------------------

def cp_sections(raw, md, part="cp"):
    """The per-case tables of a cp raw file, and the summary targets they give."""
    out, targets = [], []
    rows = [r for r in raw.rows if r["part"] == part and r["tool"] != "warmup"]
    cases = sorted({r["case"] for r in rows}, key=lambda c: (-int(c.split()[0]), c))
    has_server = any(r.get("server_cpu_s") not in (None, "", "nan") for r in rows)
    for case in cases:
        rtt, what = case.split()[0], case.split()[-1]
        base_key = "new" if raw.ok(case, "new", part) else "known"
        base = median(raw.ok(case, base_key, part), "seconds")
        out.append(f"### {what}, {rtt} ms")
        out.append("")
        scol, sdash = (" server CPU s |", " ---: |") if has_server else ("", "")
        out.append(f"| tool | seconds | spread | CPU s |{scol} vs tcptune {base_key} | goodput "
                   "| runs |")
        out.append(f"| --- | ---: | ---: | ---: |{sdash} ---: | ---: | ---: |")
        med, cpu, size = {}, {}, {}
        for key, name in CP_NAMES:
            ok = raw.ok(case, key, part)
            if not ok:
                continue
            m = med[key] = median(ok, "seconds")
            cpu[key] = median(ok, "cpu_s")
            size[key] = max(int(r["bytes"]) for r in ok)
            gp = f"{size[key] * 8 / m / 1e6:.0f} Mbit/s" if size[key] else "-"
            sval = f" {median(ok, 'server_cpu_s'):.2f} |" if has_server else ""
            out.append(f"| {name} | {m:.2f} | {spread(ok, 'seconds')} | {cpu[key]:.2f} |{sval} "
                       f"{m / base:.2f} | {gp} | {len(ok)} |")
        out.append("")
        n = {k: len(raw.ok(case, k, part)) for k in med}
        label = {"file": "1 GiB file", "pull": "1 GiB file pulled"}.get(
            what, "tree of 2,000 x 256 KiB")
        gs = {g: med[g] for g in ("g1", "g4", "g8", "gcc") if g in med}
        if gs and "new" in med:
            best = min(gs, key=gs.get)
            r = med["new"] / gs[best]
            out.append(f"tcptune cp on a new path / best GridFTP (`{gopts(best)}`): **{r:.3f}** "
                       f"(below 1: tcptune faster)")
            out.append("")
            targets.append(Target(
                f"`tcptune cp` {label}, {rtt} ms, path never seen", "best of "
                "`globus-url-copy " + "`, `".join(gopts(g) for g in gs) + "`, same run", "<= 1.0",
                f"**{r:.3f}** ({med['new']:.2f} s vs {gs[best]:.2f} s with {gopts(best)}; "
                f"{n['new']} / {n[best]} runs)", r <= 1.0, link(md)))
            rc = cpu["new"] / cpu[best]
            out.append(f"Client CPU, tcptune cp on a new path / that GridFTP run: **{rc:.3f}** "
                       f"({cpu['new']:.2f} s vs {cpu[best]:.2f} s)")
            out.append("")
            # Issue 22: a push may spend up to 1.5 x GridFTP's client CPU, because tcptune's
            # client hashes every byte it sends (BLAKE3) and GridFTP's checks nothing.
            # A pull's client receives, hashes and writes: no more CPU than GridFTP's.
            limit, why = ((1.0, "") if what == "pull" else
                          (PUSH_CPU_LIMIT, " (the client hashes every byte; GridFTP's hashes none)"))
            pushed = "" if what == "pull" else " pushed"
            if rc > limit:
                why_text = PULL_CPU_WHY if what == "pull" else PUSH_CPU_WHY
                out.append(why_text.format(gridftp=cpu[best], mine=cpu["new"]))
                out.append("")
            targets.append(Target(
                f"`tcptune cp` client CPU, {label}{pushed}, {rtt} ms, path never seen",
                f"the client CPU of the GridFTP run it is timed against (`{gopts(best)}`)",
                f"<= {limit}{why}",
                f"**{rc:.3f}** ({cpu['new']:.2f} s vs {cpu[best]:.2f} s)",
                rc <= limit, link(md)))
            others = {k: v for k, v in med.items() if k not in ("new", "known")}
            if what == "tree" and others:
                slowest = min(others.values())
                targets.append(Target(
                    f"`tcptune cp` tree of 2,000 x 256 KiB, {rtt} ms, path never seen",
                    ", ".join(dict(CP_NAMES)[k] for k in others), "faster than all",
                    f"**{med['new']:.2f} s**; the fastest of them {slowest:.2f} s "
                    f"({rng(list(n.values()), 'd')} runs each)",
                    med["new"] < slowest, link(md)))
        if "g4v" in med and "new" in med:
            # Both ends checked: GridFTP digests each end's file after the copy and compares
            # (SHA1, its client's cheapest digest); tcptune hashes every block as it moves.
            rt, rc = med["new"] / med["g4v"], cpu["new"] / cpu["g4v"]
            out.append(f"With integrity on at both tools (GridFTP `{gopts('g4v')}`): time "
                       f"**{rt:.3f}**, client CPU **{rc:.3f}** ({cpu['new']:.2f} s vs "
                       f"{cpu['g4v']:.2f} s)")
            out.append("")
            targets.append(Target(
                f"`tcptune cp` client CPU, {label}, {rtt} ms, path never seen, integrity on "
                "at both tools", f"`globus-url-copy {gopts('g4v')}`, same run", "<= 1.0",
                f"**{rc:.3f}** ({cpu['new']:.2f} s vs {cpu['g4v']:.2f} s; time {rt:.3f}, "
                f"{med['new']:.2f} s vs {med['g4v']:.2f} s; {n['new']} / {n['g4v']} runs)",
                rc <= 1.0, link(md)))
        if "known" in med and size.get("known") and what == "file":
            g = size["known"] * 8 / med["known"] / PAYLOAD_BPS
            out.append(f"Known path, payload goodput / the link's {PAYLOAD_BPS / 1e6:.0f} Mbit/s "
                       f"of payload: **{g:.3f}**")
            out.append("")
            if "new" in med:
                targets.append(Target(
                    f"`tcptune cp` 1 GiB file, {rtt} ms, known path: payload goodput",
                    f"the link's {PAYLOAD_BPS / 1e6:.0f} Mbit/s of payload", ">= 0.90",
                    f"**{g:.3f}** ({size['known'] * 8 / med['known'] / 1e6:.0f} Mbit/s, "
                    f"{med['known']:.2f} s, {n['known']} runs)", g >= 0.90, link(md)))
        server = med.get("known")
        ssh_rows = (
            ("ssh", "Over ssh / against a running server (both on the known path)",
             f"`tcptune cp` over ssh (`HOST:PATH`, far end `serve --stdio`), {what}, {rtt} ms, "
             "known path, ssh's setup included", "`tcptune cp` against a running server, same run"),
            ("sshcm", "Over an ssh connection already open / against a running server",
             f"`tcptune cp` over an ssh connection already open (ControlMaster), {what}, "
             f"{rtt} ms", "running server, same run"))
        for key, line, what_row, against in ssh_rows:
            if key not in med or not server:
                continue
            r = med[key] / server
            out.append(f"{line}: **{r:.3f}** (target <= 1.10: {'met' if r <= 1.10 else 'missed'})")
            out.append("")
            targets.append(Target(
                what_row, against, "<= 1.10", f"**{r:.3f}** ({med[key]:.2f} s vs {server:.2f} s; "
                f"{n[key]} runs)", r <= 1.10, link(md)))
        for peer, label in (("scp", "scp"), ("rsync", "rsync -W")):
            if peer in med and "ssh" in med:
                r = med[peer] / med["ssh"]
                judged = peer == "scp" and what == "file"
                target = " (target >= 4: " + ("met" if r >= 4 else "missed") + ")" if judged else ""
                out.append(f"{label} / over ssh: **{r:.3f}**{target}")
                out.append("")
                if judged:
                    targets.append(Target(
                        f"`tcptune cp` over ssh, {what}, {rtt} ms, against scp over the same sshd",
                        "scp, same run", "scp >= 4 x slower",
                        f"**{r:.3f} x** ({med[peer]:.2f} s vs {med['ssh']:.2f} s; client CPU "
                        f"{cpu['ssh']:.2f} s vs {cpu[peer]:.2f} s)", r >= 4, link(md)))
        if "sshenc" in med and "scp" in med:
            # Issue 21: with --encrypt, both sides' CPU beside scp's (a report, no target).
            scpu = {k: median(raw.ok(case, k, part), "server_cpu_s") for k in ("sshenc", "scp", "ssh")}
            r = med["scp"] / med["sshenc"]
            out.append(f"scp / over ssh with --encrypt: **{r:.3f}**; client CPU "
                       f"{cpu['sshenc']:.2f} s vs scp {cpu['scp']:.2f} s, server side "
                       f"{scpu['sshenc']:.2f} s vs scp {scpu['scp']:.2f} s")
            out.append("")
            clear = (f" (in clear {cpu['ssh']:.2f} / {scpu['ssh']:.2f} s)" if "ssh" in med else "")
            targets.append(Target(
                f"`tcptune cp --encrypt` over ssh (ChaCha20-Poly1305 on every block), {what}, "
                f"{rtt} ms, known path: CPU of the client and of the server side (a cgroup "
                "around sshd and all it starts)", "scp through the same sshd, same run",
                "report CPU beside scp's",
                f"client **{cpu['sshenc']:.2f} s** vs scp {cpu['scp']:.2f} s, server side "
                f"**{scpu['sshenc']:.2f} s** vs scp {scpu['scp']:.2f} s{clear}; wall "
                f"{med['sshenc']:.2f} s vs scp {med['scp']:.2f} s ({r:.2f} x faster; "
                f"{n['sshenc']} runs)", None, link(md)))
        if "sshtrue" in med and server:
            ok = raw.ok(case, "sshtrue", part)
            out.append(f"ssh's own setup (`ssh HOST true`) takes {med['sshtrue']:.2f} s, "
                       f"{med['sshtrue'] / server:.3f} of the running server's whole copy: the "
                       "floor of any tool started over a new ssh connection.")
            out.append("")
            targets.append(Target(
                f"why: ssh's own setup at {rtt} ms (`ssh HOST true` through the same sshd)",
                "-", "-", f"**{med['sshtrue']:.2f} s** ({spread(ok, 'seconds')}, {len(ok)} runs), "
                f"{med['sshtrue'] / server:.3f} of the running server's whole copy", None,
                link(md)))
    return out, targets


def wait_file(md, rel):
    """docs/bench/wait_NAME.md from bench/raw/wait_NAME.tsv: a gridftp part, a cp part, or both."""
    raw = Raw(rel)
    reps = max(int(r["rep"]) for r in raw.rows)
    parts = {r["part"] for r in raw.rows}
    out = ["# What the user waits for, against the tools they would use instead", ""]
    out.append(
        f"{raw.source()} {reps} repetitions "
        "interleaved; wall clock from the command's start to its end, median in seconds (and the "
        "spread, min-max), across `tcptune emu` at 1 Gbit/s under this host's default buffer "
        "limits (4 MiB maxima). The machine has 2 shared vCPUs: compare within a table, not "
        "across runs. Generated by `bench/tables`.")
    out.append("")
    targets = []
    if "gridftp" in parts:
        out.append("## 1 GiB, 100 ms, the server sending")
        out.append("")
        opts = raw.meta.get("serve_options", "not recorded")
        out.append(f"`tcptune serve`'s options beyond the host's limits in this part: {opts}; "
                   "GridFTP's server runs under the host's limits.")
        out.append("")
        body, t = download_section(raw, md)
        out += body + [""]
        targets += t
    if "cp" in parts:
        out.append("## Files: tcptune cp against GridFTP, scp and rsync")
        out.append("")
        out.append(
            "Pushed from tmpfs in side a to tmpfs in side b (the disk is not measured): `file` is "
            "1 GiB of random bytes, `tree` 2,000 files of 256 KiB (500 MiB). Seconds from the "
            "command's start to its end (for the tools over ssh, ssh's own setup included); CPU "
            "is the client's user + system seconds (with the ssh it runs); server CPU, where "
            "measured, is what every server process in side b used during the run (a cgroup "
            "around `tcptune serve`, sshd with its sessions and what they start, the GridFTP "
            "server). `tcptune serve` runs without --force-buffers here: every tool is under the "
            "host's buffer limits.")
        out.append("")
        body, t = cp_sections(raw, md)
        out += body
        targets += t
    failed = raw.failed()
    if failed:
        out.append(f"Failed runs ({len(failed)}), left out of the medians: {', '.join(failed)}")
        out.append("")
    return "\n".join(out), targets


def download_section(raw, md):
    """The gridftp part's table (a 1 GiB download at 100 ms) and its summary targets."""
    case = "100 ms download"
    rtt = 0.1
    out = ["| tool | seconds | spread | CPU s | vs tcptune on a new path | runs |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    med, n = {}, {}
    for key, name in DL_NAMES:
        ok = raw.ok(case, key, "gridftp")
        if ok:
            med[key], n[key] = median(ok, "seconds"), len(ok)
    base = med.get("new", float("nan"))
    for key, name in DL_NAMES:
        if key in med:
            ok = raw.ok(case, key, "gridftp")
            out.append(f"| {name} | {med[key]:.2f} | {spread(ok, 'seconds')} | "
                       f"{median(ok, 'cpu_s'):.2f} | {med[key] / base:.2f} | {len(ok)} |")
    out.append("")
    gs = {g: med[g] for g in ("g1", "g4", "g8") if g in med}
    if "new" not in med or not gs:
        return out, []
    size = max(int(r["bytes"]) for r in raw.ok(case, "new", "gridftp"))
    limit = 2 * rtt + size * 8 / PAYLOAD_BPS + rtt / 2
    best = min(gs, key=gs.get)
    out.append(
        f"The physical limit for this row (two round trips of handshakes and request, 1 GiB at "
        f"the {PAYLOAD_BPS / 1e6:.0f} Mbit/s of payload a 1500-byte MTU leaves, half a round "
        f"trip) is {limit:.2f} s: tcptune on a path never seen takes {med['new'] / limit:.3f} x "
        f"that, `globus-url-copy -p {best[1:]}` {gs[best] / limit:.3f} x.")
    r1 = med["new"] / gs[best]
    targets = [
        Target("what the user waits for: 1 GiB download, 100 ms, 1 Gbit/s, default limits, path "
               "never seen (in-band measurement)", "best of `globus-url-copy -p 1/4/8` "
               "(GridFTP), same run", "<= 1.0",
               f"**{r1:.3f}** ({med['new']:.2f} s vs {gs[best]:.2f} s with -p {best[1:]}; "
               f"{n['new']} / {n[best]} runs)", r1 <= 1.0, link(md))]
    if "known" in med:
        r2 = med["new"] / med["known"]
        targets.append(Target(
            "same, path never seen vs known path", "tcptune on a known path", "within 5%",
            f"**{r2:.3f}** ({med['new']:.2f} s vs {med['known']:.2f} s); physical limit "
            f"{limit:.2f} s: new path {med['new'] / limit:.3f} x it", abs(r2 - 1) <= 0.05,
            link(md)))
    return out, targets


# ---- wait_vs_peers.sh: wait.md (gridftp and cp parts) -------------------------------------

def wait_md(md, rel):
    raw = Raw(rel)
    body, targets = download_section(raw, md)
    serve = raw.meta.get("serve_options")
    note = [f"`tcptune serve`'s options beyond the host's limits in this run: {serve}.", ""] \
        if serve else []
    out = [raw.source("gridftp") + " Generated by `bench/tables`.", ""] + note + body
    regions = {"download": "\n".join(out)}
    reps = max(int(r["rep"]) for r in raw.rows if r["part"] == "cp")
    body, cp_targets = cp_sections(raw, md)
    head = [raw.source("cp") + f" Up to {reps} repetitions; generated by `bench/tables`.", ""]
    head += note
    failed = raw.failed()
    if failed:
        body.append(f"Failed runs ({len(failed)}), left out of the medians: {', '.join(failed)}")
        body.append("")
    regions["cp"] = "\n".join(head + body).rstrip("\n")
    return regions, targets + cp_targets
