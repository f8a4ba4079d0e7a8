"""The rendered book, read the way a reader meets it: in Chromium, offline.

The built HTML is served on 127.0.0.1; every page is visited, and every request to another
host is aborted and recorded. For every page: no external request, no console error, every
formula typeset by MathJax (no raw TeX left in the text) and every image loaded. The
download-notebook button resolves. On chapter 1's slider the (k, c) settings are set like a
reader would, and the numbers it shows are compared with lneps.layer_norm.

Chromium is Debian's (/usr/bin/chromium, or $LNEPS_CHROMIUM), driven by Playwright; no
browser is ever downloaded. Without it these tests skip, unless $CI is set: then they fail.
The HTML comes from `make book` (the session fixture `built_book`), or from
$LNEPS_BOOK_HTML if set (a build made elsewhere, e.g. with --path-output).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np

import lneps
from browser import IMAGES_JS, MATHJAX_READY_JS, new_page

SLIDER_PAGE = "book/layer_norm_by_hand.html"
TOKEN = np.array([2.0, 4.0, 6.0, 8.0])
# The points chapter 1 discusses, then a few more across the grid.
SLIDER_POINTS = [(1, 0), (-1, 0), (0, 3), (0.25, 4), (-2, -4), (1.75, -3.5), (-0.25, 1.5)]
MAX_PAGE_WEIGHT = 2_000_000  # bytes a page may load beyond the theme's own assets


def test_every_page_was_visited(visits, html_dir):
    assert SLIDER_PAGE in visits and "book/intro.html" in visits
    assert len(visits) == len(list((html_dir / "book").glob("*.html"))) + len(
        list(html_dir.glob("*.html")))


def test_no_request_leaves_the_machine(visits):
    external = {rel: v["external"] for rel, v in visits.items() if v["external"]}
    assert external == {}
    # Belt and braces: every request the pages made went to the local server (or data:).
    elsewhere = {rel: [u for u in v["requests"] if not u.startswith((v["base"], "data:"))]
                 for rel, v in visits.items()}
    assert {rel: u for rel, u in elsewhere.items() if u} == {}


def test_no_console_errors_and_no_failed_requests(visits):
    errors = {rel: v["console"] + v["failed"] for rel, v in visits.items()
              if v["console"] or v["failed"]}
    assert errors == {}


def test_every_formula_is_typeset(visits):
    problems = {}
    for rel, v in visits.items():
        f = v["formulas"]
        if f["math"] and not v["mathjax_ready"]:
            problems[rel] = "MathJax did not start"
        elif f["untypeset"] or f["errors"] or v["raw_tex"] or f["containers"] < f["math"]:
            problems[rel] = {"untypeset": f["untypeset"], "tex errors": f["errors"],
                             "raw TeX in the text": v["raw_tex"]}
    assert problems == {}
    # The chapters are mostly formulas: the check must have had something to check.
    assert visits[SLIDER_PAGE]["formulas"]["containers"] >= 20
    assert visits["book/intro.html"]["formulas"]["containers"] >= 3


def test_every_image_loaded(visits):
    broken = {rel: [i["src"] for i in v["images"] if not i["ok"]] for rel, v in visits.items()}
    assert {rel: b for rel, b in broken.items() if b} == {}
    assert any(i["ok"] for i in visits[SLIDER_PAGE]["images"])  # chapter 1's figure


def test_download_button_fetches_the_notebook(visits, browser, site, html_dir):
    links = {rel: v["download"] for rel, v in visits.items() if v["download"]}
    assert any(rel.endswith(SLIDER_PAGE) for rel in links)
    context, page, _ = new_page(browser, site)
    try:
        for rel, hrefs in links.items():
            for href in hrefs:
                path = unquote(urlsplit(href).path).lstrip("/")
                assert path.startswith("_sources/"), href
                response = page.request.get(site + urlsplit(href).path.lstrip("/"))  # served anew
                assert response.status == 200, href
                assert response.body() == (html_dir / path).read_bytes()
                if path.endswith(".ipynb"):
                    assert response.json()["nbformat"] == 4
    finally:
        context.close()


def test_the_download_button_offers_the_book_as_a_pdf_where_there_is_one(visits, html_dir):
    # tools/sphinx_pdf_button.py: every page's download menu links to the book's PDF once
    # `make pdf` has written it next to the HTML (tests/rendered/test_pdf.py fetches it), and
    # no page links it before: `make book` alone makes none.
    built = (html_dir / "layer-normalization-epsilon.pdf").is_file()
    menus = {rel: v["downloads"] for rel, v in visits.items() if v["downloads"]}
    assert SLIDER_PAGE in menus
    wrong = {rel: hrefs for rel, hrefs in menus.items()
             if any(h.endswith("/layer-normalization-epsilon.pdf") for h in hrefs) != built}
    assert wrong == {}, f"the PDF {'is' if built else 'is not'} built"


def _slider_state(page) -> dict:
    root = page.locator(".lneps-slider")
    return {
        "k": float(root.get_attribute("data-k")),
        "c": float(root.get_attribute("data-c")),
        "token": [float(t) for t in
                  root.locator("[data-role=token] .lneps-val").all_text_contents()],
        "shown": root.locator("[data-role=normalized] .lneps-val").all_text_contents(),
        "heights": [b["height"] for b in (el.bounding_box() for el in
                    root.locator("[data-role=normalized] .lneps-bar").all())],
    }


def test_slider_shows_layer_norm(browser, site, html_dir, report):
    context, page, log = new_page(browser, site)
    try:
        page.goto(site + SLIDER_PAGE, wait_until="load")
        page.wait_for_selector(".lneps-slider[data-ready]")
        assert page.locator("[data-role=nojs]").count() == 0
        k_input = page.locator("input[data-role=k]")
        c_input = page.locator("input[data-role=c]")
        assert (k_input.get_attribute("min"), k_input.get_attribute("max")) == ("-2", "2")
        # Opens at the seed's token [2, 4, 6, 8].
        first = _slider_state(page)
        assert (first["k"], first["c"], first["token"]) == (1, 0, [2, 4, 6, 8])
        for k, c in SLIDER_POINTS:
            k_input.fill(str(k))
            c_input.fill(str(c))
            state = _slider_state(page)
            expected = np.round(lneps.layer_norm(k * TOKEN + c), 3) + 0.0
            assert (state["k"], state["c"]) == (k, c)
            assert state["token"] == (k * TOKEN + c).tolist()
            assert [float(s) for s in state["shown"]] == expected.tolist(), (k, c)
            assert all(re.fullmatch(r"-?\d+\.\d{3}", s) for s in state["shown"])
            # The bars draw the same numbers: heights proportional to |value|.
            heights = np.array(state["heights"])
            if np.abs(expected).max() == 0:
                assert heights.max() < 0.5
            else:
                np.testing.assert_allclose(heights / heights.max(),
                                           np.abs(expected) / np.abs(expected).max(), atol=0.02)
        # A reader's keyboard moves k by one step: 0.25 -> 0.5 (c stays).
        k_input.fill("0.25")
        k_input.focus()
        page.keyboard.press("ArrowRight")
        state = _slider_state(page)
        assert (state["k"], state["c"]) == (0.5, SLIDER_POINTS[-1][1])
        assert [float(s) for s in state["shown"]] == (
            np.round(lneps.layer_norm(0.5 * TOKEN + state["c"]), 3) + 0.0).tolist()
        assert log["console"] == [] and log["external"] == []
    finally:
        context.close()
    report.lines.append(
        f"slider: {len(SLIDER_POINTS)} (k, c) settings set in the page, shown values equal "
        "lneps.layer_norm to 3 decimals"
    )


def _weight(paths: list[str], html_dir: Path) -> dict:
    sizes = {"page": 0, "images": 0, "mathjax": 0, "theme": 0, "other": 0}
    for path in sorted(set(paths)):
        file = html_dir / path
        if not file.is_file():
            continue
        size = file.stat().st_size
        if path.startswith("_static/mathjax/"):
            sizes["mathjax"] += size
        elif path.startswith("_images/"):
            sizes["images"] += size
        elif path.startswith("_static/") or path == "searchindex.js":
            sizes["theme"] += size  # the theme's and Sphinx's own CSS, JS and fonts
        elif path.endswith(".html"):
            sizes["page"] += size
        else:
            sizes["other"] += size
    return sizes


def test_slider_page_weight(browser, site, html_dir, report):
    context, page, log = new_page(browser, site)
    try:
        page.goto(site + SLIDER_PAGE, wait_until="load")
        page.evaluate(MATHJAX_READY_JS)
        page.evaluate(IMAGES_JS)
        page.wait_for_load_state("networkidle")
        paths = [unquote(urlsplit(u).path).lstrip("/") for u in log["requests"]
                 if u.startswith(site)]
    finally:
        context.close()
    w = _weight(paths, html_dir)
    beyond = w["page"] + w["images"] + w["mathjax"] + w["other"]
    kb = lambda n: f"{n / 1000:.0f} kB"  # noqa: E731
    report.lines.append(
        f"slider page weight beyond the theme's assets: {kb(beyond)} (HTML {kb(w['page'])}, "
        f"images {kb(w['images'])}, MathJax {kb(w['mathjax'])}, other {kb(w['other'])}); "
        f"theme and Sphinx assets {kb(w['theme'])}"
    )
    assert w["page"] > 0 and w["mathjax"] > 0
    assert beyond < MAX_PAGE_WEIGHT


# How JupyterLab shows a trusted text/html output: set innerHTML on an attached node (which
# does not run scripts), then replace each <script> with a fresh copy, which runs it.
JUPYTERLAB_RENDER_JS = """html => {
  const host = document.createElement("div");
  host.className = "jp-RenderedHTMLCommon";
  document.body.appendChild(host);
  host.innerHTML = html;
  for (const old of [...host.getElementsByTagName("script")]) {
    const fresh = document.createElement("script");
    for (const a of old.attributes) fresh.setAttribute(a.name, a.value);
    fresh.textContent = old.textContent;
    old.parentNode.replaceChild(fresh, old);
  }
}"""


def test_slider_works_as_a_stored_notebook_output(browser):
    """The stored output alone, with no Sphinx page, no server and no network: a notebook."""
    from notebooks import read

    stored = [o["data"]["text/html"] for c in read("layer_norm_by_hand.ipynb").cells
              if c.cell_type == "code" for o in c.outputs if "text/html" in o.get("data", {})]
    assert len(stored) == 1
    context = browser.new_context(offline=True)
    try:
        page = context.new_page()
        errors = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content("<!doctype html><html><body></body></html>")
        page.evaluate(JUPYTERLAB_RENDER_JS, stored[0])
        page.wait_for_selector(".lneps-slider[data-ready]")
        for k, c in [(-1, 0), (0.25, 100)]:
            page.locator("input[data-role=k]").fill(str(k))
            page.locator("input[data-role=c]").fill(str(c))
            shown = page.locator("[data-role=normalized] .lneps-val").all_text_contents()
            assert [float(s) for s in shown] == (
                np.round(lneps.layer_norm(k * TOKEN + c), 3) + 0.0).tolist()
        assert errors == []
    finally:
        context.close()
