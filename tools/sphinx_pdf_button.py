"""Sphinx extension: the download button offers the whole book as a PDF, where there is one.

sphinx-book-theme's download menu ends with ".pdf", which prints the current page from the
browser. This replaces it with a link to the book's own PDF, which `make pdf` writes to
_build/pdf/ and copies next to the HTML (``PDF_NAME`` at the site's root), and then builds the
pages again. `make book` alone makes no PDF, so its pages offer none: the link is written only
when the file is in the output folder as the pages are built, and a page never links a PDF
that is not there.
"""

from pathlib import Path

PDF_NAME = "layer-normalization-epsilon.pdf"


def pdf_is_built(outdir) -> bool:
    """Whether `make pdf` has put the book's PDF in the HTML output folder ``outdir``."""
    return (Path(outdir) / PDF_NAME).is_file()


def _offer_the_book(app, pagename, templatename, context, doctree):
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        group["buttons"] = [b for b in group["buttons"] if b.get("label") != "download-pdf-button"]
        if not pdf_is_built(app.outdir):
            continue
        group["buttons"].append({
            "type": "link",
            "url": context["pathto"](PDF_NAME, 1),
            "text": "book .pdf",
            "tooltip": "Download the whole book as a PDF",
            "icon": "fas fa-file-pdf",
            "label": "download-book-pdf-button",
        })


def setup(app):
    # after sphinx-book-theme has made its buttons (priority 501)
    app.connect("html-page-context", _offer_the_book, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
