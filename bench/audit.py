"""Bench: `sframe audit` of this machine's /usr/bin and /usr/lib/x86_64-linux-gnu, plus a
known set so that there is something to find (issue 17).

The known set (bench/out/audit-known): 40 programs of /usr/bin copied and given a
generated V3 `.sframe` by `sframe inject`, the fixtures' programs of binutils 2.40, 2.44
and 2.46 (V1, V2, V3), and an archive mixing the fixtures' V2 and V3 objects. The audit is
run with the cache off on 2 processes and on a Dask local cluster of 2 workers; the two
JSON reports must be identical. The HTML report is rendered in headless Chromium when it
is installed (screenshot bench/out/audit.png).

    python3 bench/audit.py [--known N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FIXTURES, OUT, bench_environment, venv_sframe

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


def timed_audit(sframe: list[str], env: dict[str, str], paths: list[str], options: list[str],
                output: Path, cache: bool = False) -> tuple[float, str]:
    began = time.monotonic()
    run = subprocess.run([*sframe, "audit", *paths, *([] if cache else ["--no-cache"]),
                          *options, "--json", str(output)], capture_output=True, text=True,
                         env=env, check=False)
    elapsed = time.monotonic() - began
    if run.returncode not in (0, 1):
        sys.exit(f"bench: sframe audit failed: {run.stderr.strip()[-400:]}")
    return elapsed, run.stdout


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
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    sframe, env = venv_sframe(), bench_environment()
    subprocess.run([str(Path(sframe[0]).parent / "python"), "-m", "pip", "install", "-q",
                    "dask[distributed]"], check=True, capture_output=True)
    known = known_set(sframe, args.known)
    paths = [*SYSTEM, str(known)]
    pool_json, dask_json = OUT / "audit.pool.json", OUT / "audit.dask.json"
    pool_time, table = timed_audit(sframe, env, paths, ["-j", "2"], pool_json)
    dask_time, _ = timed_audit(sframe, env, paths, ["-j", "2", "--dask", "local"], dask_json)
    same = pool_json.read_bytes() == dask_json.read_bytes()
    print(table, end="")
    print(f"wall time: {pool_time:.1f} s on 2 processes, {dask_time:.1f} s on a Dask local "
          f"cluster of 2 workers; JSON {'identical' if same else 'DIFFERENT'} "
          f"({pool_json.stat().st_size:,} bytes)")
    # The cache: a first run fills it, a rerun judges nothing again (a private cache).
    cached_env = dict(env, XDG_CACHE_HOME=str(OUT / "audit-cache"))
    shutil.rmtree(OUT / "audit-cache", ignore_errors=True)
    fill, _ = timed_audit(sframe, cached_env, paths, ["-j", "2"], OUT / "audit.c1.json", True)
    rerun, _ = timed_audit(sframe, cached_env, paths, ["-j", "2"], OUT / "audit.c2.json", True)
    same_cached = (OUT / "audit.c2.json").read_bytes() == pool_json.read_bytes()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"cache: {fill:.1f} s filling it, {rerun:.1f} s for the rerun "
          f"(JSON {'identical' if same_cached else 'DIFFERENT'}); the largest process "
          f"of any run peaked at {peak:.0f} MiB")
    page = OUT / "audit.html"
    subprocess.run([*sframe, "audit", *paths, "--html", str(page)], env=env, check=False,
                   capture_output=True)
    print(screenshot(page, OUT / "audit.png"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
