"""Bench: `sframe audit` of this machine's /usr/bin (and with --full /usr/lib/x86_64-linux-gnu),
plus a known set so that there is something to find (issue 17).

The known set (bench/out/audit-known): 40 programs of /usr/bin copied and given a
generated V3 `.sframe` by `sframe inject`, the fixtures' programs of binutils 2.40, 2.44
and 2.46 (V1, V2, V3), and an archive mixing the fixtures' V2 and V3 objects.

The audit runs on 2 processes (`-j 2`) and on a Dask local cluster of 2 workers, with the
same cache state (bench/common.py): cold, each run with an empty private XDG_CACHE_HOME
(every file judged); warm, a private cache filled by one untimed run of the same mode
(nothing judged again: the results are read from the cache). The modes alternate order,
--runs repeats (>= 5), median [min-max] of the wall time and of the peak memory of the
audit's process tree (the `sframe audit` process and all its descendants, the pool's or
the cluster's workers included: the sum of their proportional set sizes, PSS, sampled
every 50 ms from /proc, so shared pages count once; and the largest single process's
peak RSS, from wait4). Dask is installed, if missing, before anything is measured. Every
JSON report must be identical, whatever the mode and cache state. The HTML report is
rendered in headless Chromium when it is installed (screenshot bench/out/audit.png).

    env -u PYTHONDONTWRITEBYTECODE python3 bench/audit.py [--known N] [--runs N] [--full]

By default /usr/bin and the known set (~2 minutes on 2 cores); --full adds
/usr/lib/x86_64-linux-gnu (several minutes: 20 audits of it). The tree's PSS is sampled,
so a warm run of a fraction of a second may show less than its true peak; the largest
process's RSS (wait4) is exact.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FIXTURES, MIN_REPEATS, OUT, bench_environment, cold_and_warm, spread, venv_sframe

SYSTEM = ["/usr/bin", "/usr/lib/x86_64-linux-gnu"]


def known_set(sframe: list[str], count: int) -> Path:
    root = OUT / "audit-known"
    shutil.rmtree(root, ignore_errors=True)
    (root / "injected").mkdir(parents=True)
    programs = sorted(path for path in Path("/usr/bin").iterdir()
                      if path.is_file() and not path.is_symlink()
                      and path.read_bytes()[:4] == b"\x7fELF")[:count]
    for program in programs:
        subprocess.run([*sframe, "inject", str(program), "-o",
                        str(root / "injected" / program.name)], check=False,
                       capture_output=True)
    (root / "fixtures").mkdir()
    for version in ("2.40", "2.44", "2.46"):
        shutil.copy(FIXTURES / version / "x86_64" / "O2" / "prog",
                    root / "fixtures" / f"prog-{version}")
    members = []
    for version, name in (("2.44", "old"), ("2.46", "new")):
        for source in ("cfi", "deep"):
            target = root / "fixtures" / f"{source}-{name}.o"
            shutil.copy(FIXTURES / version / "x86_64" / "O2" / f"{source}.o", target)
            members.append(str(target))
    subprocess.run(["ar", "rcs", str(root / "fixtures" / "libmixed.a"), *members], check=True)
    for member in members:
        os.unlink(member)
    return root


@dataclass
class Audit:
    seconds: float
    #: Peak of the tree's summed PSS, and the largest single process's peak RSS, in KiB.
    tree_pss: int
    largest_rss: int
    output: Path
    table: str


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (through /proc/PID/task/TID/children)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())
            except OSError:
                continue
    return found


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def timed_audit(sframe: list[str], env: dict[str, str], paths: list[str], options: list[str],
                output: Path) -> Audit:
    """One audit, its process tree's memory sampled every 50 ms until it ends."""
    began = time.monotonic()
    log = output.with_suffix(".log")
    with open(log, "w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        child = subprocess.Popen([*sframe, "audit", *paths, *options, "--json", str(output)],
                                 stdout=stdout, stderr=stderr, text=True, env=env)
        peak = 0
        while True:
            # (wait4, not poll: its rusage is this child's; ru_maxrss is the largest peak
            # RSS among the audit and the descendants it waited for.)
            pid, status, rusage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, sum(_pss(each) for each in _tree(child.pid)))
            time.sleep(0.05)
        child.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.monotonic() - began
        stdout.seek(0)
        stderr.seek(0)
        table, errors = stdout.read(), stderr.read()
    log.unlink()
    if child.returncode not in (0, 1):
        sys.exit(f"bench: sframe audit failed: {errors.strip()[-400:]}")
    usage = rusage.ru_maxrss
    return Audit(elapsed, peak, usage, output, table)


def screenshot(page: Path, image: Path) -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return "no Chromium here (apt-get install chromium): not rendered"
    profile = OUT / "chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-background-networking", "--disable-component-update",
                          "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                          "--window-size=1200,1600", f"--screenshot={image}",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-background-networking", f"--user-data-dir={profile}",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    rows = dom.count("<tr>")
    return (f"rendered: {image} ({image.stat().st_size:,} bytes), {rows} table rows in the "
            f"DOM" if run.returncode == 0 and image.exists() else
            f"Chromium failed: {run.stderr.strip()[-200:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--known", type=int, default=40)
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    parser.add_argument("--full", action="store_true",
                        help="/usr/lib/x86_64-linux-gnu too")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    sframe, env = venv_sframe(), bench_environment()
    python = str(Path(sframe[0]).parent / "python")
    if subprocess.run([python, "-c", "import distributed"], capture_output=True,
                      check=False).returncode != 0:
        subprocess.run([python, "-m", "pip", "install", "-q", "dask[distributed]"], check=True,
                       capture_output=True)  # before anything is measured
    known = known_set(sframe, args.known)
    paths = [*(SYSTEM if args.full else SYSTEM[:1]), str(known)]
    count = itertools.count()

    def mode(options: list[str]) -> Callable[[dict[str, str]], Audit]:
        return lambda run_env: timed_audit(sframe, run_env, paths, options,
                                           OUT / f"audit.{next(count)}.json")

    figures = cold_and_warm({"2 processes": mode(["-j", "2"]),
                             "Dask local, 2 workers": mode(["-j", "2", "--dask", "local"])},
                            args.runs, env)
    runs = [run for columns in figures.values() for audits in columns.values()
            for run in audits]
    reports = {run.output.read_bytes() for run in runs}
    print(runs[-1].table, end="")
    print(f"sframe audit of {', '.join(paths)}: {len(runs)} runs, JSON "
          f"{'identical in every run' if len(reports) == 1 else 'DIFFERENT between runs'} "
          f"({runs[-1].output.stat().st_size:,} bytes)")
    for state, columns in figures.items():
        print(f"  {state} cache{'':18}{'wall s':>20}{'tree PSS peak, MiB':>24}"
              f"{'largest process, MiB':>24}")
        for name, audits in columns.items():
            print(f"    {name:26}{spread([a.seconds for a in audits], '.1f'):>20}"
                  f"{spread([a.tree_pss / 1024 for a in audits]):>24}"
                  f"{spread([a.largest_rss / 1024 for a in audits]):>24}")
    for run in runs:
        run.output.unlink(missing_ok=True)
    page = OUT / "audit.html"
    subprocess.run([*sframe, "audit", *paths, "--html", str(page)], env=env, check=False,
                   capture_output=True)
    print(screenshot(page, OUT / "audit.png"))
    return 0 if len(reports) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
