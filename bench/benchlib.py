"""What the Python inside the bench scripts shares (each script runs it from the repository's
root: `sys.path.insert(0, "bench")`, then `from benchlib import ...`): run a command for its
output, time one with its CPU, name the commit a binary was built from, and stop the servers
a run started with the emulated path they ran on."""
import os
import subprocess
import sys
import time


def sh(*cmd, **kw):
    """Run cmd, its output captured as text."""
    return subprocess.run(list(cmd), capture_output=True, text=True, **kw)


def timed(cmd):
    """Run cmd (its output discarded, its error kept for a failure's line) and reap it with its
    rusage: wall seconds, exit status, user+system CPU seconds."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"  failed ({code}): {' '.join(cmd)}: {err.strip()[-300:]}", file=sys.stderr)
    return time.monotonic() - t0, code, ru.ru_utime + ru.ru_stime


def commit_of(binary):
    """The commit in `binary --version` ("unknown" when it names none)."""
    ver = sh(binary, "--version").stdout
    return ver.split("commit ", 1)[1].split(")")[0].split()[0] if "commit " in ver else "unknown"


class Servers:
    """The servers of one run on the emulated path `name`: started quiet, stopped together
    (SIGTERM, 10 s, SIGKILL) with the path itself by `down()`."""

    def __init__(self, binary, name):
        self.binary, self.name, self.procs = binary, name, []

    def start(self, cmd, **kw):
        self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, **kw))

    def down(self):
        for p in self.procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        sh(self.binary, "emu", "down", self.name)
