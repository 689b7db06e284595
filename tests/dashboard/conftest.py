"""Fixtures of the live training page's tests: a headless Chromium driven by Playwright.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, or the binary named by the
environment variable ``DGD_CHROMIUM``), launched by path: Playwright's own browser
download (``playwright install``) is never used.  Without a binary, or without the
``playwright`` package, the tests that ask for ``browser`` skip and say why.
"""

import os
import shutil
from pathlib import Path

import pytest

#: Headless flags: no sandbox (CI runs as root), and none of Chromium's background
#: connections (on a closed network they flood the log with refused connections).
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)

NO_CHROMIUM = "no Chromium: apt-get install chromium, or set DGD_CHROMIUM"


def chromium_path():
    """The Chromium binary to launch (``$DGD_CHROMIUM``, else ``/usr/bin/chromium``, else
    ``chromium`` on the PATH), or None when there is none."""
    named = os.environ.get("DGD_CHROMIUM")
    if named:
        return named if Path(named).is_file() and os.access(named, os.X_OK) else None
    default = Path("/usr/bin/chromium")
    if default.is_file() and os.access(default, os.X_OK):
        return str(default)
    return shutil.which("chromium")


def browser_unavailable():
    """Why the browser tests cannot run here (a sentence), or None when they can."""
    if chromium_path() is None:
        where = f"DGD_CHROMIUM={os.environ['DGD_CHROMIUM']!r} is not an executable file" \
            if os.environ.get("DGD_CHROMIUM") else "no /usr/bin/chromium and no chromium on the PATH"
        return f"{NO_CHROMIUM} ({where})"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as err:
        return f"the playwright package is missing ({err}): pip install '.[test]' (never `playwright install`)"
    return None


@pytest.fixture
def why_no_browser():
    """:func:`browser_unavailable` (for the test of the skip reason)."""
    return browser_unavailable


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (Playwright ``Browser``) for the module; closed at its end."""
    why = browser_unavailable()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS), headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    """A fresh browser page (its own context: no cookies or storage shared between tests)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield context.new_page()
    finally:
        context.close()
