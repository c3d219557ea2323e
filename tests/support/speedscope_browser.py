"""Open a speedscope JSON file in speedscope itself (the app of the ``speedscope`` npm
package, its ``dist/release``), in a headless Chromium driven by Playwright, and print what
it shows as one JSON object:

- ``errors``: script errors and console errors of the page;
- ``title``: the toolbar's title, the open profile's name and ``(i/N)``;
- ``profiles``: [name, total weight as shown] of every profile in the profile selector;
- ``sandwich``: [total, self, symbol] of every row of the Sandwich view of the open profile.

The app and the profile are served to the page by Playwright itself under a made-up
origin (nothing is fetched from elsewhere: every other request is aborted); the profile
is loaded as speedscope loads a URL given in ``#profileURL=``.

    python speedscope_browser.py --app DIST_RELEASE --browser CHROMIUM PROFILE.json

Exits 2 when the browser cannot be started.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ORIGIN = "http://speedscope.localhost"
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
PROFILE_ROWS = """() => [...document.querySelectorAll('tr')]
    .map(row => [...row.children].map(cell => cell.innerText.trim()))
    .filter(cells => cells.length === 3 && /^[0-9]+$/.test(cells[0]))
    .map(cells => cells.slice(1))"""
SANDWICH_ROWS = """() => [...document.querySelectorAll('tr')]
    .map(row => [...row.children].map(cell => cell.innerText.trim()))
    .filter(cells => cells.length === 3 && !/^[0-9]+$/.test(cells[0])
                     && cells[0] !== 'Total' && cells[0] !== '#')"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path)
    parser.add_argument("--app", type=Path, required=True)
    parser.add_argument("--browser", required=True)
    arguments = parser.parse_args()
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=arguments.browser, args=FLAGS)
        except Error as error:
            print(str(error).splitlines()[0])
            return 2
        try:
            print(json.dumps(look(browser, arguments.app, arguments.profile.read_bytes())))
        finally:
            browser.close()
    return 0


def look(browser: Any, app: Path, profile: bytes) -> dict[str, Any]:
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text)
            if message.type == "error" else None)

    def serve(route: Any) -> None:
        url = route.request.url
        if not url.startswith(ORIGIN + "/"):
            route.abort()
            return
        name = url[len(ORIGIN) + 1:].split("#")[0].split("?")[0] or "index.html"
        if name == "profile.json":
            route.fulfill(body=profile, content_type="application/json")
        elif (app / name).is_file() and (app / name).resolve().is_relative_to(app.resolve()):
            route.fulfill(path=str(app / name))
        else:
            route.fulfill(status=404, body="")

    page.context.route("**/*", serve)
    page.goto(f"{ORIGIN}/index.html#profileURL={ORIGIN}/profile.json")
    page.get_by_text("Sandwich").click()
    page.wait_for_function("() => document.querySelectorAll('tr').length > 1")
    counter = page.locator("text=/\\(\\d+\\/\\d+\\)/").first  # "(i/N)", after the name
    title = counter.locator("xpath=..").inner_text().strip() if counter.count() else ""
    return {"errors": errors, "title": title,
            "profiles": page.evaluate(PROFILE_ROWS), "sandwich": page.evaluate(SANDWICH_ROWS)}


if __name__ == "__main__":
    sys.exit(main())
