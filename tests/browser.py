"""The built book in Chromium, shared by the browser tests and the layout test (a pytest
plugin, loaded from conftest.py, so its session fixtures run once for both).

The built HTML is served on 127.0.0.1; every page is visited once, and every request to
another host is aborted and recorded. Each visit records what the browser tests check (no
external request, no console error, formulas typeset, images loaded, the download links) and
what the layout test checks, at a desktop size and at a phone size: in the main column,
every element that is wider than the column, clipped, or a display formula that would have
to scroll; and each figure's displayed width.

Chromium is Debian's (/usr/bin/chromium, or $LNEPS_CHROMIUM), driven by Playwright; no
browser is ever downloaded. Without it these tests skip, unless $CI is set: then they fail.
The HTML comes from `make book` (the session fixture `built_book`), or from
$LNEPS_BOOK_HTML if set (a build made elsewhere, e.g. with --path-output).
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path
from urllib.parse import urljoin

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHROMIUM = os.environ.get("LNEPS_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 30_000
# The two sizes every page must fit: a laptop and a phone (CSS px).
VIEWPORTS = {"desktop": (1280, 900), "phone": (390, 844)}

# Raw TeX that MathJax should have consumed: display/inline delimiters, $...$ and commands.
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\\[A-Za-z]{2,}|\$[^\s$][^$]*\$")

# Text nodes outside code, scripts and MathJax's own output: what a reader sees as prose.
VISIBLE_TEXT_JS = """() => {
  const skip = "pre, code, script, style, textarea, mjx-container, .highlight, [hidden]";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const out = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest(skip)) continue;
    if (el.getClientRects().length === 0) continue;  // not rendered (display: none)
    out.push(n.textContent);
  }
  return out.join(" ");
}"""

FORMULAS_JS = """() => {
  const math = [...document.querySelectorAll(".math")];
  return {
    math: math.length,
    untypeset: math.filter(m => !m.querySelector("mjx-container"))
                   .map(m => m.textContent.trim().slice(0, 80)),
    containers: document.querySelectorAll("mjx-container").length,
    errors: [...document.querySelectorAll("mjx-merror")].map(e => e.textContent.slice(0, 80)),
  };
}"""

IMAGES_JS = """async () => {
  const imgs = [...document.images];
  for (const img of imgs) {
    if (!img.complete) {
      img.scrollIntoView();
      await new Promise(r => { img.addEventListener("load", r, {once: true});
                               img.addEventListener("error", r, {once: true});
                               setTimeout(r, 5000); });
    }
  }
  return imgs.map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0}));
}"""

MATHJAX_READY_JS = """async () => {
  if (!document.querySelector(".math")) return true;
  for (let i = 0; i < 200 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
    await new Promise(r => setTimeout(r, 50));
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
  await MathJax.startup.promise;
  return true;
}"""

# Opens what a reader can open (solutions in dropdowns, folded code), so that it is measured.
OPEN_ALL_JS = """() => { document.querySelectorAll("details").forEach(d => { d.open = true; }); }"""

# What does not fit the main column. An element may be wider than the column only inside a
# scroll box of its own (overflow-x auto or scroll: a table container, a code block); a box
# that hides overflow must not be hiding any; a display formula must fit without scrolling
# (long equations break; a formula a cell prints may scroll in its output box, like code);
# and the page itself never scrolls sideways.
LAYOUT_JS = """() => {
  const main = document.querySelector("article.bd-article");
  const box = main.getBoundingClientRect();
  const overflowX = el => getComputedStyle(el).overflowX;
  const scrolls = el => ["auto", "scroll"].includes(overflowX(el));
  const inScrollBox = el => {
    for (let p = el.parentElement; p && p !== main; p = p.parentElement) if (scrolls(p)) return true;
    return false;
  };
  const name = el => {
    const cls = typeof el.className === "string" && el.className.trim()
      ? "." + el.className.trim().split(/\\s+/).slice(0, 2).join(".") : "";
    const host = el.parentElement && el.parentElement.closest("[id]");
    const text = (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 50);
    return el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + cls
      + (host ? " in #" + host.id : "") + (text ? ' "' + text + '"' : "");
  };
  const out = {column: Math.round(box.width), page: document.documentElement.scrollWidth,
               viewport: window.innerWidth, overflow: [], clipped: [], math: [], images: []};
  for (const el of main.querySelectorAll("*")) {
    if (el.closest("mjx-assistive-mml")) continue;  // MathJax's copy for screen readers
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;   // not rendered
    if ((r.right > box.right + 1 || r.left < box.left - 1) && !inScrollBox(el))
      out.overflow.push(`${name(el)}: ${Math.round(r.left - box.left)}..${Math.round(r.right - box.left)} px`
                        + ` in a ${Math.round(box.width)} px column`);
    // MathJax clips its own stretchy glyphs (mjx-ext) by design; a formula as a whole is
    // checked as an element (too wide) and below (a display formula that scrolls).
    if (["hidden", "clip"].includes(overflowX(el)) && el.scrollWidth > el.clientWidth + 1
        && !inScrollBox(el) && !el.closest("mjx-container"))
      out.clipped.push(`${name(el)}: ${el.scrollWidth} px of content in ${el.clientWidth} px`);
  }
  for (const m of main.querySelectorAll("mjx-container[display=true]")) {
    if (m.closest(".cell_output")) continue;  // a computed result scrolls in its output box
    if (m.scrollWidth > m.clientWidth + 1)
      out.math.push(`${name(m.closest("div.math") || m)}: ${m.scrollWidth} px wide in ${m.clientWidth} px`);
  }
  // Tables: each one's box, whether it scrolls in a box of its own, whether its first column
  // stays pinned while it scrolls, and any cell whose text is cut (hidden overflow).
  out.tables = [];
  for (const t of main.querySelectorAll("table")) {
    const r = t.getBoundingClientRect();
    if (r.width === 0) continue;
    let holder = null;  // the box it scrolls in, if any
    for (let p = t.parentElement; p && p !== main; p = p.parentElement)
      if (scrolls(p)) { holder = p; break; }
    const first = t.querySelector("tbody tr > :first-child");
    const cut = [...t.querySelectorAll("th, td")].filter(c =>
      (["hidden", "clip"].includes(overflowX(c)) || getComputedStyle(c).textOverflow === "ellipsis")
      && c.scrollWidth > c.clientWidth + 1).map(c => c.textContent.trim().slice(0, 40));
    out.tables.push({name: name(t), width: Math.round(r.width), scrolls: !!holder,
                     wider: r.width > box.width + 1,
                     pinned: !!first && getComputedStyle(first).position === "sticky", cut});
  }
  for (const img of main.querySelectorAll("img")) {
    const r = img.getBoundingClientRect();
    if (r.width === 0) continue;
    out.images.push({src: img.currentSrc || img.src, shown: r.width, natural: img.naturalWidth,
                     alt: img.getAttribute("alt") || ""});
  }
  return out;
}"""


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"Playwright for Python is not installed ({exc})"
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        return (
            f"no Chromium at {CHROMIUM}: install Debian's (`apt-get install -y chromium` as "
            "root; .ci/run does it) or point $LNEPS_CHROMIUM at one"
        )
    return None


class _Report:
    """Prints the browser measurements in make test's summary, with or without -s."""

    def __init__(self):
        self.lines: list[str] = []

    def pytest_terminal_summary(self, terminalreporter):
        if self.lines:
            terminalreporter.write_sep("-", "the book in Chromium")
            for line in self.lines:
                terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def report(request):
    rep = _Report()
    request.config.pluginmanager.register(rep, "lneps-browser-report")
    return rep


@pytest.fixture(scope="session")
def browser():
    reason = _unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}. CI is set, so the browser tests fail instead of skipping.")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def html_dir(request, browser) -> Path:
    override = os.environ.get("LNEPS_BOOK_HTML")
    if override:
        path = Path(override)
    else:
        code, output = request.getfixturevalue("built_book")
        assert code == 0, output[-3000:]
        path = ROOT / "_build" / "html"
    assert (path / "index.html").is_file(), f"no built book at {path}"
    return path


def serve(directory: Path):
    """Serve ``directory`` on 127.0.0.1 (a free port) from a thread: (base URL, stop)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}/", stop


@pytest.fixture(scope="session")
def site(html_dir):
    base, stop = serve(html_dir)
    yield base
    stop()


def _record(page, log: dict) -> None:
    """Record the page's console errors, requests and failed requests into ``log`` (the
    sync and the async API register listeners alike)."""
    page.on("console", lambda m: m.type == "error" and log["console"].append(m.text))
    page.on("pageerror", lambda e: log["console"].append(f"uncaught: {e}"))
    page.on("request", lambda r: log["requests"].append(r.url))
    page.on("response", lambda r: r.status >= 400 and log["failed"].append(f"{r.status} {r.url}"))
    page.on("requestfailed", lambda r: log["failed"].append(f"{r.failure} {r.url}"))


def new_page(browser, base: str, viewport=VIEWPORTS["desktop"]):
    """A fresh page (no cache) that aborts and records requests to any other host."""
    context = browser.new_context(service_workers="block",
                                  viewport={"width": viewport[0], "height": viewport[1]})
    context.set_default_timeout(TIMEOUT_MS)
    log = {"external": [], "console": [], "failed": [], "requests": []}

    def abort(r):
        log["external"].append(r.request.url)
        r.abort()

    # Only requests that leave the local server reach Python (a regex route is matched in
    # the browser); intercepting every local request too would slow each page down.
    context.route(re.compile("^(?!" + re.escape(base) + ")"), abort)
    page = context.new_page()
    _record(page, log)
    return context, page, log


def html_pages(html_dir: Path) -> list[str]:
    return sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                  if "_static" not in p.parts and "_sources" not in p.parts)


VISITS_AT_ONCE = 3  # pages loaded concurrently: MathJax typesets in each page's own process


async def _visit_async(browser, base: str, html_dir: Path, rel: str) -> dict:
    """One visit of ``base + rel`` in a fresh context (no cache): what the browser and layout
    tests check, at every size of :data:`VIEWPORTS` for a chapter page."""
    context = await browser.new_context(service_workers="block", viewport={
        "width": VIEWPORTS["desktop"][0], "height": VIEWPORTS["desktop"][1]})
    context.set_default_timeout(TIMEOUT_MS)
    log = {"external": [], "console": [], "failed": [], "requests": []}

    async def abort(r):
        log["external"].append(r.request.url)
        await r.abort()

    await context.route(re.compile("^(?!" + re.escape(base) + ")"), abort)
    page = await context.new_page()
    _record(page, log)
    try:
        await page.goto(base + rel, wait_until="load")
        refresh = re.search(r'http-equiv="refresh" content="0; url=([^"]+)"',
                            (html_dir / rel).read_text(encoding="utf-8"), re.IGNORECASE)
        if refresh:  # _build/html/index.html only redirects to the root page
            await page.wait_for_url(urljoin(base + rel, refresh.group(1)))
            await page.wait_for_load_state("load")
        ready = await page.evaluate(MATHJAX_READY_JS)
        formulas = await page.evaluate(FORMULAS_JS)
        images = await page.evaluate(IMAGES_JS)
        text = await page.evaluate(VISIBLE_TEXT_JS)
        download = await page.eval_on_selector_all(
            "a.btn-download-source-button", "els => els.map(e => e.href)")
        downloads = await page.eval_on_selector_all(
            ".dropdown-download-buttons a", "els => els.map(e => e.href)")
        layout = {}
        if not refresh and await page.query_selector("article.bd-article"):
            await page.evaluate(OPEN_ALL_JS)
            for size, (width, height) in VIEWPORTS.items():
                await page.set_viewport_size({"width": width, "height": height})
                layout[size] = await page.evaluate(LAYOUT_JS)
        return {"url": page.url, "mathjax_ready": ready, "formulas": formulas, "images": images,
                "raw_tex": sorted(set(RAW_TEX.findall(text))), "download": download,
                "downloads": downloads, "layout": layout, **log}
    finally:
        await context.close()


def start_visits(html_dir: Path):
    """Begin visiting every page of ``html_dir``, :data:`VISITS_AT_ONCE` at a time, with a
    server and an async Playwright of their own in a thread of their own (the session's sync
    Playwright runs an event loop in this one, where asyncio.run cannot start another). Returns
    ``finish()``, which waits and returns {page: visit} or raises what the visits raised."""
    import asyncio

    from playwright.async_api import async_playwright

    pages = html_pages(html_dir)

    async def main(base):
        async with async_playwright() as pw:
            chromium = await pw.chromium.launch(executable_path=CHROMIUM)
            gate = asyncio.Semaphore(VISITS_AT_ONCE)

            async def one(rel):
                async with gate:
                    return rel, {"base": base, **await _visit_async(chromium, base, html_dir, rel)}

            try:
                return dict(await asyncio.gather(*(one(rel) for rel in pages)))
            finally:
                await chromium.close()

    out: dict = {}

    def run():
        base, stop = serve(html_dir)
        try:
            out["result"] = asyncio.run(main(base))
        except BaseException as exc:  # re-raised in the thread that calls finish()
            out["error"] = exc
        finally:
            stop()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()

    def finish() -> dict:
        worker.join()
        if "error" in out:
            raise out["error"]
        return {rel: out["result"][rel] for rel in pages}

    return finish


@pytest.fixture(scope="session")
def visits(browser, html_dir, report) -> dict:
    result = start_visits(html_dir)()
    pages = list(result)
    typeset = sum(v["formulas"]["containers"] for v in result.values())
    external = sum(len(v["external"]) for v in result.values())
    report.lines.append(
        f"pages visited: {len(pages)}; formulas typeset: {typeset}; "
        f"external requests: {external}; console errors: "
        f"{sum(len(v['console']) for v in result.values())}; images loaded: "
        f"{sum(len(v['images']) for v in result.values())}"
    )
    return result
