"""Look at the SVG flame graph of ``sframe report --format svg`` in a real headless browser.

Renders the SVG (by default the Lua fixture recording's, made with the repository's
``sframe``), saves screenshots under bench/out/, then uses it as a person would:

1. the page loads without script errors and shows every frame;
2. Ctrl-F opens the search prompt; the term typed there highlights the matching frames
   (their fill turns to the search colour) and "Matched: x%" shows their share, which
   must equal the share of samples whose stack has a matching frame (from the folded
   output of the same recording, when the bench made it);
3. clicking a frame zooms to it (it fills the width, "Reset Zoom" appears), "Reset Zoom"
   goes back, Escape clears the search.

Needs Playwright (``pip install playwright``) and a Chromium: ``--browser PATH`` (the
tests pass the system's, e.g. /usr/bin/chromium), else Playwright's own (``playwright
install chromium``), else the system's (``apt-get install chromium``). It runs headless,
without a sandbox (root in a container has none) and with a fresh profile. Prints one
JSON line of results; exits 1 if a check fails, 2 if no browser can be started.

    python3 bench/flamegraph_browser.py [--svg FILE] [--term REGEX] [--folded FILE]
                                        [--browser PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
LUA = REPO.parent / "shared" / "fixtures" / "real" / "lua-2.46-x86_64"
SYSTEM_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def make_outputs(directory: Path) -> tuple[Path, Path]:
    """The SVG and folded report of the Lua fixture recording, made with this tree."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "XDG_CACHE_HOME": str(OUT / "cache")}
    paths = []
    for form in ("svg", "folded"):
        target = directory / f"lua.{form}"
        subprocess.run([sys.executable, "-m", "pysframe", "report", str(LUA / "perf.data"),
                        "--binaries", str(LUA), "--format", form, "-o", str(target)],
                       check=True, env=env)
        paths.append(target)
    return paths[0], paths[1]


def expected_share(folded: Path, term: str) -> float:
    """The share of samples whose stack has a frame matching ``term``."""
    pattern = re.compile(term)
    matched = total = 0
    for line in folded.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        total += int(count)
        # "all" is the flame graph's root frame
        if any(pattern.search(frame) for frame in ["all", *stack.split(";")]):
            matched += int(count)
    return matched / total if total else 0.0


def svg_size(svg: Path) -> tuple[int, int]:
    """The width and height the SVG asks for (at most 4000 pixels high)."""
    head = svg.read_text()[:2000]
    width = re.search(r'<svg[^>]* width="(\d+)"', head)
    height = re.search(r'<svg[^>]* height="(\d+)"', head)
    return (int(width[1]) if width else 1200, min(int(height[1]) if height else 800, 4000))


#: Flags for a Chromium started by root in a container: no sandbox (root cannot have
#: one), no GPU, nothing fetched or synced in the background. Playwright gives every
#: launch a fresh user-data-dir of its own.
CHROMIUM_FLAGS = ["--no-sandbox", "--headless", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"]


class NoBrowser(Exception):
    """No browser could be started."""


def launch(playwright: Any, executable: str | None) -> Any:
    """The Chromium at ``executable``; without one, Playwright's own, else the system's."""
    if executable is not None:
        candidates = [executable]
    else:
        candidates = [None, *filter(None, map(shutil.which, SYSTEM_BROWSERS))]
    errors = []
    for candidate in candidates:
        try:
            return playwright.chromium.launch(executable_path=candidate, args=CHROMIUM_FLAGS,
                                              timeout=60_000)
        except Exception as error:  # Playwright raises its own Error types
            errors.append(f"{candidate or 'Playwright chromium'}: "
                          f"{str(error).strip().splitlines()[0]}")
    raise NoBrowser("; ".join(errors))


def check(svg: Path, term: str, out: Path, executable: str | None = None
          ) -> dict[str, Any]:
    """Render, search and zoom in ``svg`` (in the Chromium at ``executable``);
    screenshots into ``out``."""
    from playwright.sync_api import sync_playwright

    results: dict[str, Any] = {"svg": str(svg), "term": term, "errors": []}
    with sync_playwright() as playwright:
        browser = launch(playwright, executable)
        results["browser"] = f"{browser.browser_type.name} {browser.version}"
        # full-page screenshots of an SVG document hang in Chromium: size the viewport
        width, height = svg_size(svg)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(15_000)  # a broken page fails a step, not the run
        page.on("pageerror", lambda error: results["errors"].append(str(error)))
        page.on("dialog", lambda dialog: dialog.accept(term))
        page.goto(svg.resolve().as_uri())
        try:
            use(page, term, out, results)
        except Exception as error:  # a step the page did not allow: a failed check
            results["stopped"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
        browser.close()
    return results


def use(page: Any, term: str, out: Path, results: dict[str, Any]) -> None:
    """Look, search, zoom and reset as a person would; what is seen goes into ``results``."""
    results["frames"] = page.locator("g.f").count()
    results["visible_frames"] = page.evaluate(
        "Array.from(document.querySelectorAll('g.f rect'))"
        ".filter(r => r.getBoundingClientRect().height > 0).length")
    results["title"] = page.locator("#title > title").text_content()
    page.screenshot(path=str(out / "flamegraph.png"))
    page.mouse.click(2, 2)  # focus the document (a click on the background)
    page.keyboard.press("Control+f")
    results["matched_text"] = page.locator("#matched").text_content()
    results["highlighted"] = page.locator("g.f.match").count()
    results["highlighted_fill"] = page.evaluate(
        "Array.from(document.querySelectorAll('g.f.match rect'))"
        ".every(r => r.getAttribute('fill') === SEARCH_FILL)")
    results["matching_names"] = page.evaluate(
        f"Array.from(document.querySelectorAll('g.f')).filter(g => "
        f"new RegExp({json.dumps(term)}).test(g.getAttribute('data-n'))).length")
    page.screenshot(path=str(out / "flamegraph-search.png"))
    widest = page.evaluate(
        "Array.from(document.querySelectorAll('g.f.match'))"
        ".sort((a, b) => b.getAttribute('data-w') - a.getAttribute('data-w'))[0]"
        ".getAttribute('data-i')")
    target = page.locator(f'g.f[data-i="{widest}"]')
    target.click()
    results["zoomed_width"] = float(target.locator("rect").get_attribute("width") or 0)
    results["unzoom_shown"] = page.locator("#unzoom").is_visible()
    page.screenshot(path=str(out / "flamegraph-zoom.png"))
    page.locator("#unzoom").click()
    results["unzoom_hidden_after_reset"] = not page.locator("#unzoom").is_visible()
    page.keyboard.press("Escape")
    results["highlighted_after_escape"] = page.locator("g.f.match").count()


def failures(results: dict[str, Any], share: float | None) -> list[str]:
    """The checks that failed, in words."""
    problems = []
    if "stopped" in results:
        return [f"stopped: {results['stopped']}", *(
            [f"script errors: {results['errors']}"] if results["errors"] else [])]
    if results["errors"]:
        problems.append(f"script errors: {results['errors']}")
    if not results["frames"] or results["visible_frames"] != results["frames"]:
        problems.append(f"{results['visible_frames']} of {results['frames']} frames drawn")
    if not results["highlighted"] or results["highlighted"] != results["matching_names"]:
        problems.append(f"{results['highlighted']} frames highlighted, "
                        f"{results['matching_names']} match")
    if not results["highlighted_fill"]:
        problems.append("a highlighted frame does not have the search colour")
    match = re.fullmatch(r"Matched: ([0-9.]+)%", results["matched_text"] or "")
    if match is None:
        problems.append(f"matched text is {results['matched_text']!r}")
    elif share is not None and abs(float(match[1]) - 100 * share) > 0.2:
        problems.append(f"matched {match[1]}%, samples say {100 * share:.2f}%")
    if not results["unzoom_shown"] or results["zoomed_width"] < 1100:
        problems.append(f"zoom: width {results['zoomed_width']}, "
                        f"Reset Zoom shown {results['unzoom_shown']}")
    if not results["unzoom_hidden_after_reset"] or results["highlighted_after_escape"]:
        problems.append("Reset Zoom or Escape did not reset")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", type=Path, help="the flame graph (default: the Lua fixture's)")
    parser.add_argument("--folded", type=Path, help="the folded output of the same recording")
    parser.add_argument("--term", default="^luaH_", help="what to search for (a regex)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the screenshots go")
    parser.add_argument("--browser", help="the Chromium to run (default: Playwright's, "
                                          "else the system's)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    svg, folded = args.svg, args.folded
    if svg is None:
        svg, folded = make_outputs(args.out)
    try:
        results = check(svg, args.term, args.out, args.browser)
    except NoBrowser as error:
        print(json.dumps({"no_browser": str(error)}))
        return 2
    share = expected_share(folded, args.term) if folded is not None else None
    results["expected_share"] = share
    results["failures"] = failures(results, share)
    print(json.dumps(results))
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
