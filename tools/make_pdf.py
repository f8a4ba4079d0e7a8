"""``make pdf``: the whole book as one PDF, printed by Chromium after MathJax has typeset it.

1. Sphinx's ``singlehtml`` builder renders every page of _toc.yml into one HTML file, with
   the same configuration as ``make book`` (warnings are errors) and the same stored
   notebook outputs (nothing is executed).
2. Chromium (Debian's, through Playwright) opens it from a local server, offline, waits for
   MathJax and the images, opens every dropdown (solutions, folded code), and prints it:
   A4, each chapter from a new page, a table of contents with page numbers, page numbers in
   the footer, and PDF bookmarks.

The table of contents needs the pages the chapters start on, which are known only after
printing: the book is printed once with placeholder numbers, the start pages are read back
with ``pdftotext`` (each chapter starts a page, with its title at the top), and the book is
printed again with the real numbers; the placeholders have the same width, so nothing moves,
and the final file is read back to prove it.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("LNEPS_CHROMIUM", "/usr/bin/chromium")
PLACEHOLDER = "000"


def build_singlehtml(outdir: Path) -> int:
    from jupyter_book.sphinx import build_sphinx

    return build_sphinx(
        ROOT, outdir,
        doctreedir=outdir.parent / ".doctrees-singlehtml",
        noconfig=True, path_config=str(ROOT / "_config.yml"),
        confoverrides={"nitpicky": True, "latex_individualpages": False},
        builder="singlehtml", warningiserror=True, keep_going=True,
    )


def toc_entries() -> list[dict]:
    """[{"part": caption or "", "file": "book/x"}] in reading order, root first."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = [{"part": "", "file": toc["root"]}]
    for entry in toc.get("chapters", []) or []:
        entries.append({"part": "", "file": entry["file"]})
    for part in toc.get("parts", []) or []:
        for entry in part.get("chapters", []):
            entries.append({"part": part.get("caption", ""), "file": entry["file"]})
    return entries


# Prepares the single page for print: every dropdown open, no theme chrome, each chapter on a
# new page, and a table of contents at the front whose page numbers are filled in later.
PREPARE_JS = """(args) => {
  const [entries, placeholder] = args;
  document.documentElement.dataset.theme = "light";
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  document.querySelectorAll("img").forEach(i => { i.loading = "eager"; });
  const main = document.querySelector("article.bd-article");
  const heading = el => el.querySelector("h1, h2, h3, h4, h5, h6");
  const titleOf = h => { const c = h.cloneNode(true);
    c.querySelectorAll("a.headerlink").forEach(a => a.remove()); return c.textContent.trim(); };
  // singlehtml nests every chapter inside the root page's table of contents, headings
  // demoted; bring each one back to the top level, its title an h1, in reading order.
  const promote = (section, by) => {
    section.querySelectorAll("h2, h3, h4, h5, h6").forEach(h => {
      const n = document.createElement("h" + Math.max(1, +h.tagName[1] - by));
      for (const a of h.attributes) n.setAttribute(a.name, a.value);
      n.innerHTML = h.innerHTML;
      h.replaceWith(n);
    });
  };
  const chapters = [{file: entries[0].file, section: main.querySelector("section"), part: ""}];
  for (const span of [...main.querySelectorAll('span[id^="document-"]')]) {
    const section = span.nextElementSibling;
    if (!section || section.tagName !== "SECTION") continue;
    promote(section, +heading(section).tagName[1] - 1);
    main.append(span, section);
    const file = span.id.slice("document-".length);
    const entry = entries.find(e => e.file === file) || {part: ""};
    chapters.push({file, section, part: entry.part});
  }
  // The root page's own list of chapters is now empty: the printed contents replace it.
  for (const w of [...main.querySelectorAll(".toctree-wrapper")]) {
    const s = w.closest("section");
    w.remove();
    if (s && s !== chapters[0].section && !s.querySelector("p, ul, ol, div, table")) s.remove();
  }
  const toc = document.createElement("nav");
  toc.id = "lneps-pdf-contents";
  let html = "<h1 class='lneps-contents-title'>Contents</h1><ol>";
  let part = "";
  chapters.forEach((c, i) => {
    const h = heading(c.section);
    h.id = h.id || ("lneps-chapter-" + i);
    if (c.part && c.part !== part) {
      html += `<li class="lneps-part">${c.part}</li>`;
      const label = document.createElement("p");
      label.className = "lneps-part-label";
      label.textContent = c.part;
      c.section.prepend(label);
    }
    part = c.part;
    html += `<li class="lneps-entry"><a href="#${h.id}"><span class="lneps-entry-title">${titleOf(h)}</span>`
          + `<span class="lneps-leader"></span>`
          + `<span class="lneps-page" data-index="${i}">${placeholder}</span></a></li>`;
    if (i > 0) c.section.classList.add("lneps-new-page");
  });
  toc.innerHTML = html + "</ol>";
  main.prepend(toc);
  return chapters.map(c => titleOf(heading(c.section)));
}"""

PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm 15mm; }
.bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer,
.prev-next-area, .bd-footer-article, .bd-footer-content, .headerlink, .copybtn,
.toctree-wrapper, .skip-link, .pst-async-banner-revealer, #jb-print-docs-body, #jb-print-toc,
.onlyprint { display: none !important; }
/* The theme hides each page's first h1 in print (it prints the page title above); here every
   chapter's h1 is its title. */
.bd-main .bd-content .bd-article h1:first-of-type { display: block !important; }
.bd-main .bd-content { margin-left: 0 !important; }
.bd-main .bd-content .bd-article-container { max-width: 100% !important; }
.bd-container, .bd-page-width { max-width: 100% !important; }
.bd-main { margin: 0 !important; }
html, body { font-size: 14px; }
.lneps-new-page { break-before: page; }
#lneps-pdf-contents { break-after: page; }
#lneps-pdf-contents ol { list-style: none; padding: 0; }
#lneps-pdf-contents li.lneps-part { font-weight: 700; margin-top: 1em; }
#lneps-pdf-contents li.lneps-entry a { display: flex; color: inherit; text-decoration: none; padding: .15em 0; }
#lneps-pdf-contents .lneps-leader { flex: 1; border-bottom: 1px dotted #888; margin: 0 .4em .35em; }
#lneps-pdf-contents .lneps-page { font-variant-numeric: tabular-nums; }
.lneps-part-label { font-variant: small-caps; letter-spacing: .05em; color: #555; margin: 0; }
figure, img, .cell_input, .cell_output, div.math, table { break-inside: avoid; }
h1, h2, h3 { break-after: avoid; }
pre { white-space: pre-wrap; word-break: break-word; }
"""

FOOTER = ("<div style='font-size:9px;width:100%;text-align:center;color:#555;'>"
          "<span class='pageNumber'></span> / <span class='totalPages'></span></div>")
HEADER = ("<div style='font-size:8px;width:100%;text-align:right;color:#888;"
          "padding-right:15mm;'>{title}</div>")

WAIT_JS = """async () => {
  for (let i = 0; i < 400 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
    await new Promise(r => setTimeout(r, 50));
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  await Promise.all([...document.images].map(img => img.complete ? null :
    new Promise(r => { img.onload = img.onerror = r; })));
  await document.fonts.ready;
  return {math: document.querySelectorAll("mjx-container").length,
          untypeset: [...document.querySelectorAll(".math")].filter(m => !m.querySelector("mjx-container")).length,
          images: document.images.length,
          broken: [...document.images].filter(i => !(i.naturalWidth > 0)).length};
}"""


def page_texts(pdf: Path) -> list[str]:
    """The text of each page of ``pdf`` (pdftotext separates pages with form feeds)."""
    out = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True,
                         capture_output=True, text=True).stdout
    return out.split("\f")


def _page_texts_without(header: str, pdf: Path) -> list[str]:
    texts = []
    for t in page_texts(pdf):
        t = " ".join(t.split())
        texts.append(t[len(header):].lstrip() if header and t.startswith(header) else t)
    return texts


def first_content_page(pdf: Path, root_title: str, header: str) -> int:
    """The 1-based page the book's text starts on: the first page, after the contents,
    that opens with the root page's title."""
    texts = _page_texts_without(header, pdf)
    for i, text in enumerate(texts):
        if i > 0 and text.startswith(" ".join(root_title.split())):
            return i + 1
    raise RuntimeError(f"the root page {root_title!r} was not found after the contents")


def start_pages(pdf: Path, titles: list[str], first: int, header: str) -> list[int]:
    """The 1-based page each chapter starts on: ``titles[0]`` on page ``first``, then each
    title at the top of a later page (chapters start on a new page; the running header,
    ``header``, is left out)."""
    texts = _page_texts_without(header, pdf)
    pages, start = [first], first - 1
    for title in titles[1:]:
        want = " ".join(title.split())
        found = next((i for i in range(start + 1, len(texts)) if want in texts[i][:len(want) + 80]), None)
        if found is None:
            raise RuntimeError(f"chapter {title!r} not found at the top of any page")
        pages.append(found + 1)
        start = found
    return pages


def print_pdf(html_dir: Path, out: Path, title: str) -> dict:
    from playwright.sync_api import sync_playwright

    # singlehtml writes the book into the root page's file (book/intro.html) with links
    # relative to the output's root; served from the root, they resolve.
    root_page = yaml.safe_load((ROOT / "_toc.yml").read_text())["root"] + ".html"
    shutil.copy2(html_dir / root_page, html_dir / "book.html")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(html_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    external = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM)
            context = browser.new_context(color_scheme="light")
            context.route(lambda url: not url.startswith(base),
                          lambda route: (external.append(route.request.url), route.abort()))
            page = context.new_page()
            page.set_default_timeout(120_000)
            page.goto(base + "book.html", wait_until="load")
            state = page.evaluate(WAIT_JS)
            if state["untypeset"] or state["broken"]:
                raise RuntimeError(f"not ready to print: {state}")
            titles = page.evaluate(PREPARE_JS, [toc_entries(), PLACEHOLDER])
            page.add_style_tag(content=PRINT_CSS)
            page.emulate_media(media="print")
            options = dict(format="A4", print_background=True, display_header_footer=True,
                           header_template=HEADER.format(title=title), footer_template=FOOTER,
                           margin={"top": "16mm", "bottom": "18mm", "left": "15mm", "right": "15mm"},
                           outline=True, tagged=True)
            first = out.with_suffix(".pass1.pdf")
            page.pdf(path=str(first), **options)
            contents_pages = first_content_page(first, titles[0], title) - 1
            numbers = start_pages(first, titles, contents_pages + 1, title)
            # Printing the real numbers can reflow the contents and move a chapter by a page;
            # print again with the pages found until the contents and the chapters agree.
            for _ in range(4):
                page.evaluate("""(numbers) => {
                  document.querySelectorAll("#lneps-pdf-contents .lneps-page").forEach(s => {
                    s.textContent = String(numbers[+s.dataset.index]); });
                }""", numbers)
                page.pdf(path=str(out), **options)
                found = start_pages(out, titles, contents_pages + 1, title)
                if found == numbers:
                    break
                numbers = found
            first.unlink()
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    if external:
        raise RuntimeError(f"the book asked for other hosts while printing: {external[:5]}")
    # The numbers printed must be the pages the chapters start on in the final file.
    final = start_pages(out, titles, contents_pages + 1, title)
    if final != numbers:
        raise RuntimeError(f"table of contents {numbers} but chapters start on {final}")
    return {"titles": titles, "pages": numbers, **state}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="the PDF to write")
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "pdf" / "singlehtml")
    parser.add_argument("--copy-to", type=Path, help="also copy the PDF into this folder")
    args = parser.parse_args(argv)
    if build_singlehtml(args.html) != 0:
        print("the singlehtml build failed", file=sys.stderr)
        return 1
    title = yaml.safe_load((ROOT / "_config.yml").read_text()).get("title", "")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    info = print_pdf(args.html, args.output, title)
    pages = len(page_texts(args.output)) - 1
    print(f"wrote {args.output}: {pages} pages, {info['math']} formulas, {info['images']} images")
    print(json.dumps(dict(zip(info["titles"], info["pages"])), indent=1, ensure_ascii=False))
    if args.copy_to:
        shutil.copy2(args.output, args.copy_to / args.output.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
