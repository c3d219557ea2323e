"""``sframe audit --html`` rendered and used in a headless Chromium (the system's, driven by
Playwright): the page runs without script errors and fetches nothing, the totals it shows
are the ``--json`` summary's, the chart is drawn (one coverage and one size bar per
directory, as wide as their percentages), and the directory table sorts by a column when
its header is clicked (and the other way round on a second click)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.oracles import missing, need_browser

from conftest import FIXTURES, needs_fixtures

#: ELF files from four directories, with V2 and V3 sections.
AUDITED = ["2.46/x86_64/O2/prog", "2.46/x86_64/O2/libt.so", "2.46/x86_64/O2/main.o",
           "2.46/x86_64/O0/prog", "2.46/x86_64/O0/deep.o", "2.46/x86_64/O2/pic/deep.o",
           "2.46/x86_64/O2/pic/control.o", "2.44/x86_64/O2/prog"]
COLUMNS = ["directory", "ELF files", "with SFrame", "functions", "coverage %", "SFrame bytes",
           "size % of .eh_frame"]

#: Run by the Python that has Playwright: argv = page, Chromium, screenshot directory,
#: the column headers to click (in order); prints one JSON object.
BROWSER_SCRIPT = r"""
import json, sys
from playwright.sync_api import sync_playwright

page_path, chromium, out, clicks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
FLAGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
ROWS = ("Array.from(document.querySelectorAll('#directories tbody tr')).map(r => "
        "Array.from(r.cells).map(c => [c.textContent, c.dataset.v]))")
results = {"errors": [], "console": [], "requests": []}
with sync_playwright() as playwright:
    try:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS,
                                             timeout=60_000)
    except Exception as error:
        print(json.dumps({"no_browser": str(error).strip().splitlines()[0]}))
        sys.exit(2)
    results["browser"] = browser.version
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.on("pageerror", lambda error: results["errors"].append(str(error)))
    page.on("console", lambda message: results["console"].append(
        [message.type, message.text]))
    page.on("request", lambda request: results["requests"].append(request.url))
    page.goto("file://" + page_path)
    page.wait_for_load_state("load")
    results["title"] = page.title()
    results["totals"] = page.evaluate(
        "Array.from(document.querySelectorAll('#totals tr')).map(r => "
        "Array.from(r.cells).map(c => c.textContent))")
    results["headers"] = page.evaluate(
        "Array.from(document.querySelectorAll('#directories th')).map(t => t.textContent)")
    results["rows"] = page.evaluate(ROWS)
    results["chart"] = page.evaluate(
        "(() => { const svg = document.querySelector('svg#chart');"
        " const box = svg.getBoundingClientRect();"
        " const bars = cls => Array.from(svg.querySelectorAll('rect.' + cls)).map(r => ({"
        "   width: r.getBoundingClientRect().width, height: r.getBoundingClientRect().height,"
        "   fill: getComputedStyle(r).fill, title: r.querySelector('title').textContent}));"
        " return {width: box.width, height: box.height, bar: bars('bar'),"
        "         size: bars('size'), labels: Array.from(svg.querySelectorAll('text'))"
        "         .map(t => [t.textContent, t.getBBox().width])}; })()")
    page.locator("#chart").screenshot(path=out + "/chart.png")
    results["sorted"] = []
    for header in clicks:
        page.locator("#directories th", has_text=header).first.click()
        results["sorted"].append([header, page.evaluate(ROWS)])
    page.screenshot(path=out + "/audit.png", full_page=True)
    browser.close()
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The JSON summary and the HTML page of one audit of the files above."""
    directory = tmp_path_factory.mktemp("audit_html")
    paths = [str((FIXTURES / name).resolve()) for name in AUDITED]
    result = subprocess.run(
        [sys.executable, "-m", "pysframe", "audit", *paths, "-j", "1",
         "--json", str(directory / "audit.json"), "--html", str(directory / "audit.html")],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "XDG_CACHE_HOME": str(directory / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((directory / "audit.json").read_text())["summary"]
    return summary, directory / "audit.html"


def in_browser(page: Path, out: Path, clicks: list[str]) -> dict[str, Any]:
    python, chromium = need_browser()
    result = subprocess.run([python, "-c", BROWSER_SCRIPT, str(page.resolve()), chromium,
                             str(out), *clicks], capture_output=True, text=True, timeout=300)
    if result.returncode == 2:
        missing(f"a Chromium that starts ({result.stdout.strip()})", "apt-get install chromium")
    assert result.returncode == 0, result.stdout + result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def number(text: str) -> float:
    return float(text.replace(",", ""))


def expected_row(name: str, values: dict[str, int]) -> list[float | str]:
    """A directory's row from the JSON: its counts and the two percentages."""
    functions = values["functions"]
    coverage = 100 * (functions - values["without_sframe"]) / functions if functions else 0
    size = 100 * values["sframe_bytes"] / values["eh_frame_bytes"] if values[
        "eh_frame_bytes"] else 0
    return [name, values["elf"], values["with_sframe"], functions, coverage,
            values["sframe_bytes"], size]


@needs_fixtures
def test_audit_page_in_a_headless_browser(audited: tuple[dict[str, Any], Path],
                                          tmp_path: Path) -> None:
    summary, page = audited
    clicks = ["functions", "functions", "directory", "coverage %", "SFrame bytes"]
    shown = in_browser(page, tmp_path, clicks)
    # it runs: no script error, nothing logged, nothing fetched but the page itself
    assert shown["errors"] == [] and shown["console"] == [], shown
    assert shown["requests"] == [page.resolve().as_uri()]
    assert shown["title"].startswith("SFrame audit of ")

    # the totals are the JSON's
    totals = dict(shown["totals"])
    assert number(totals["ELF files"]) == summary["elf_files"] == len(AUDITED)
    assert number(totals["with .sframe"]) == summary["with_sframe"]
    assert totals["versions"] == ", ".join(f"{version}: {count:,}" for version, count
                                           in summary["versions"].items())
    assert summary["versions"] == {"V2": 1, "V3": len(AUDITED) - 1}
    kernel_ok, kernel_checked = totals["the kernel would take"].removesuffix(
        " sections").split(" of ")
    assert (number(kernel_ok), number(kernel_checked)) == (summary["kernel_ok"],
                                                          summary["kernel_checked"])
    coverage, functions = totals["coverage"].removesuffix(" CFI functions").split("% of ")
    assert (number(coverage), number(functions)) == (summary["coverage_percent"],
                                                     summary["functions"])
    assert number(totals["disagreeing with CFI"].removesuffix(" rows")) == \
        summary["cfi_disagreements"]
    sframe_bytes, eh_frame_bytes = totals["SFrame size"].removesuffix(
        " of .eh_frame)").split(" bytes (")
    assert (number(sframe_bytes), number(eh_frame_bytes)) == (summary["sframe_bytes"],
                                                              summary["eh_frame_bytes"])
    reasons = {label.removeprefix("no FDE: "): number(value) for label, value in
               shown["totals"] if label.startswith("no FDE: ")}
    assert reasons == dict(list(summary["reasons"].items())[:8]) and reasons

    # the table: one row per directory, as the JSON counts it
    assert shown["headers"] == COLUMNS
    directories = summary["directories"]
    assert len(directories) == 4
    rows = {row[0][0]: row for row in shown["rows"]}
    assert set(rows) == set(directories)
    for name, values in directories.items():
        expected = expected_row(name, values)
        assert rows[name][0][0] == name
        for (text, _), value in zip(rows[name][1:], expected[1:], strict=True):
            assert number(text) == pytest.approx(value, abs=0.05), (name, text, value)

    # the chart: a coverage and a size bar per directory, as wide as their percentages
    chart = shown["chart"]
    assert chart["width"] > 0 and chart["height"] > 0
    assert len(chart["bar"]) == len(chart["size"]) == len(directories)
    assert {bar["fill"] for bar in chart["bar"]} == {"rgb(74, 123, 208)"}
    assert {bar["fill"] for bar in chart["size"]} == {"rgb(208, 138, 74)"}
    coverages = sorted(round(expected_row(name, values)[4], 1)  # type: ignore[arg-type]
                       for name, values in directories.items())
    assert sorted(number(bar["title"].split()[1].rstrip("%")) for bar in chart["bar"]) == \
        coverages
    for bar in chart["bar"]:
        assert bar["width"] == pytest.approx(2 * number(bar["title"].split()[1].rstrip("%")),
                                             abs=0.6) and bar["height"] > 0
    for bar in chart["size"]:
        percent = number(bar["title"].split()[1].rstrip("%"))
        assert bar["width"] == pytest.approx(2 * min(percent, 100), abs=0.6)
    assert all(width > 0 for _, width in chart["labels"])
    assert (tmp_path / "chart.png").stat().st_size > 1000

    # clicking a header sorts by its column, a second click the other way round
    order: dict[str, list[str]] = {}
    assert [header for header, _ in shown["sorted"]] == clicks
    for header, after in shown["sorted"]:
        assert len(after) == len(directories)
        column = COLUMNS.index(header)
        keys = [row[column][0] for row in after]
        names = [row[0][0] for row in after]
        if header == "directory":
            assert keys == sorted(directories)
        else:
            values = [number(key) for key in keys]
            descending = header in order  # clicked before: now the other way
            assert values == sorted(values, reverse=descending), (header, values)
            assert len(set(values)) == len(values)  # a real order, not ties
        if header in order:  # the second click reverses the first's order
            assert names == order[header][::-1]
        order[header] = names
        # the rows stay whole: each still shows its directory's numbers
        for row in after:
            assert row == rows[row[0][0]]
