"""Bench: `sframe defer` on the Lua fixture recording, read back by us and by perf >= 6.19.

Installs Debian forky's perf 7.x privately when missing (../shared/toolchain/install-perf.sh
into bench/out/perf-new), writes the deferred recording the kernel would have made (as
built, and with --assume-sframe), prints the report's figures (bytes per sample, walks
saved by shared cookies, samples cut short by binary and why), and checks that perf's
`perf script --no-inline` (merged) and `--no-merge-callchains` print the same user frames
as `sframe script` on each file (perf 7 prints absolute addresses and names IRELATIVE PLT
slots after their resolver; the symbols and files are compared).

    python3 bench/perf_deferred.py [--recording DIR]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FIXTURES, OUT, TOOLCHAIN, bench_environment, venv_sframe


def perf7() -> list[str]:
    """The private perf 7.x (installed on first use) as its loader runs it."""
    line = subprocess.run(["bash", str(TOOLCHAIN / "install-perf.sh"), str(OUT / "perf-new")],
                          capture_output=True, text=True, check=True).stdout.strip()
    return line.splitlines()[-1].split()


def frames(text: str) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """User frames (symbol with PLT slots unnamed, file) per sample (tid, time), and the
    DEFERRED CALLCHAIN blocks of --no-merge-callchains by (tid, time, "deferred")."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if not lines:
            continue
        head = re.sub(" +", " ", lines[0]).split()
        key = (head[1], head[2] + (" deferred" if "DEFERRED" in lines[0] else ""))
        found[key] = [(re.sub(r"^\S*@plt\+", "@plt+", " ".join(line.split()[1:-1])),
                       line.split()[-1]) for line in lines[1:]
                      if not line.endswith("([kernel.kallsyms])")]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", default=str(FIXTURES / "real" / "lua-2.46-x86_64"))
    args = parser.parse_args()
    recording = Path(args.recording)
    OUT.mkdir(parents=True, exist_ok=True)
    sframe, perf, env = venv_sframe(), perf7(), bench_environment()
    version = subprocess.run([*perf, "version"], capture_output=True, text=True).stdout.strip()
    subprocess.run(["perf", "buildid-cache", "--add", str(recording / "lua")],
                   capture_output=True, check=False)
    failures = 0
    for options in ([], ["--assume-sframe"]):
        out = OUT / f"defer{'-assume' if options else ''}.perf.data"
        start = time.perf_counter()
        made = subprocess.run([*sframe, "defer", str(recording / "perf.data"), "-o", str(out),
                               "--binaries", str(recording), "--report", *options],
                              capture_output=True, text=True, env=env)
        took = time.perf_counter() - start
        print(made.stdout + f"  (sframe defer took {took:.2f} s)")
        if made.returncode != 0:
            print(made.stderr)
            return 1
        for merge in ([], ["--no-merge-callchains"]):
            ours = subprocess.run([*sframe, "script", str(out), "--binaries", str(recording),
                                   *merge], capture_output=True, text=True, env=env).stdout
            theirs = subprocess.run([*perf, "script", "--no-inline", *merge, "-i", str(out)],
                                    capture_output=True, text=True).stdout
            mine, perfs = frames(ours), frames(theirs)
            same = sum(1 for key in mine if perfs.get(key) == mine[key])
            failures += same != len(mine) or mine.keys() != perfs.keys()
            print(f"  {version}, perf script --no-inline {' '.join(merge)}: {same:,} of "
                  f"{len(mine):,} blocks with the same user frames as sframe script")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
