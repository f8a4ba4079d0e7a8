r"""Figures drawn at the size the book shows them, with text a reader can read.

A figure is designed in CSS pixels: ``subplots(560, 320)`` makes a figure that the page shows
560 px wide on a laptop (and narrower, scaled, on a phone). The image is rendered at twice
that resolution, so it stays sharp on high-density screens, and the page is told its width.

:func:`png` turns a finished figure into the object a notebook displays (or glues): a PNG
whose text chunks record the design width (``lneps:css-width``) and the smallest font size
on the figure in CSS px (``lneps:min-text-px``), measured on the figure's own text artists.
The layout test reads both from the built page's image, so "text at least 9 CSS px as
displayed" is measured, not assumed: displayed text = ``min-text-px * shown / css-width``.

What a figure shows. :func:`describe` writes a figure as text: its size, every visible text on
it (titles, labels, tick labels, legend entries, annotations) and, artist by artist, the data
it plots, each number to 4 significant digits (a digest, with the count and the range). That
text is the figure's ``text/plain`` form, so a notebook test compares what the figure shows;
its rasterized bytes differ between CPUs (anti-aliasing arithmetic) and are not compared.

Sizes. A phone's column is about 358 px wide, so a 560 px figure is shown at 0.64 of its
size there: text of :data:`MIN_TEXT_PT` (11 pt, 15.3 CSS px at design size) is then 9.8 px.
:func:`png` refuses a figure with smaller text, or wider than :data:`MAX_WIDTH`.
"""

from __future__ import annotations

import hashlib
import io
import struct
import zlib

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.spines import Spine
from matplotlib.text import Text

__all__ = ["CSS_PX_PER_INCH", "DPI", "MIN_TEXT_PT", "MAX_WIDTH", "STYLE", "subplots", "png",
           "smallest_text_pt", "describe", "FigurePNG"]

CSS_PX_PER_INCH = 100
"""One inch of a figure is 100 CSS px on the page (matplotlib's default screen dpi)."""

DPI = 2 * CSS_PX_PER_INCH
"""Image pixels per inch: two per CSS px, sharp on high-density screens."""

MIN_TEXT_PT = 11.0
"""The smallest font size allowed on a figure (points at design size: 15.3 CSS px)."""

MAX_WIDTH = 640
"""The widest figure, in CSS px: the laptop column is about 700 px; a phone's about 358."""

STYLE = {
    "font.size": MIN_TEXT_PT,
    "axes.titlesize": MIN_TEXT_PT + 1,
    "axes.labelsize": MIN_TEXT_PT,
    "xtick.labelsize": MIN_TEXT_PT,
    "ytick.labelsize": MIN_TEXT_PT,
    "legend.fontsize": MIN_TEXT_PT,
    "figure.titlesize": MIN_TEXT_PT + 1,
    "lines.linewidth": 1.8,
    "lines.markersize": 6,
}
"""Font sizes (all at least :data:`MIN_TEXT_PT`) and line weights for the book's figures."""


def subplots(width: float, height: float, nrows: int = 1, ncols: int = 1, **kwargs):
    """``(fig, axes)`` like ``plt.subplots``, for a figure shown ``width`` x ``height`` CSS
    px, in :data:`STYLE`.

    The layout is constrained (labels kept inside the figure), so the saved image is exactly
    the design size, with no tight-bbox cropping that would change it. :data:`STYLE` goes
    into matplotlib's rcParams, so the labels, legends and titles added afterwards get it
    too (each notebook runs in its own kernel). The figure is a bare
    :class:`~matplotlib.figure.Figure` on an Agg canvas, not a pyplot one: nothing shows it
    but :func:`png`, nothing has to close it, and a notebook never loads pyplot (0.15 s a
    kernel).
    """
    for label, value in (("width", width), ("height", height)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{label} must be a positive number of CSS px; got {value!r}")
    if width > MAX_WIDTH:
        raise ValueError(f"width {width} px is wider than the book's figures ({MAX_WIDTH} px)")
    matplotlib.rcParams.update(STYLE)
    fig = Figure(figsize=(width / CSS_PX_PER_INCH, height / CSS_PX_PER_INCH), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def smallest_text_pt(fig, *, drawn: bool = False) -> float:
    """The smallest font size (points) of any visible, non-empty text on ``fig``.

    Tick labels exist only once the figure is drawn: ``drawn=True`` says it just was (by
    ``savefig``), which spares a second drawing."""
    if not drawn:
        fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and _on_figure(t, fig)]
    if not sizes:
        raise ValueError("the figure has no text: give it axis labels")
    return float(min(sizes))


def _on_figure(text: Text, fig) -> bool:
    # Tick labels of ticks outside the axis limits are kept but not drawn.
    box = text.get_window_extent()
    w, h = fig.canvas.get_width_height()
    return box.x1 > 0 and box.y1 > 0 and box.x0 < w and box.y0 < h and box.width > 0


def _numbers(values) -> str:
    """Count, range and a digest of numbers, each to 4 significant digits: equal for plots that
    look the same, whatever the last bits of the data."""
    flat = np.asarray(np.ma.filled(np.ma.asarray(values, dtype=float), np.nan)).ravel()
    if flat.size == 0:
        return "no data"
    text = " ".join(f"{v:.4g}" for v in flat.tolist())
    finite = flat[np.isfinite(flat)]
    span = f"{finite.min():.4g}..{finite.max():.4g}" if finite.size else "none finite"
    return f"{flat.size} numbers in {span}, digest {hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _data(artist):
    """The numbers ``artist`` draws, in data coordinates, or None for an artist with none."""
    if isinstance(artist, Line2D):
        return artist.get_xydata()
    if isinstance(artist, AxesImage):
        return artist.get_array()
    if isinstance(artist, Collection):
        parts = [np.ravel(artist.get_offsets())]
        if artist.get_array() is not None:
            parts.append(np.ravel(artist.get_array()))
        parts += [np.ravel(p.vertices) for p in artist.get_paths()]
        return np.concatenate(parts)
    if isinstance(artist, Patch) and not isinstance(artist, Spine):  # spines: the axes' frame
        return artist.get_patch_transform().transform(artist.get_path().vertices)
    return None


def describe(fig, *, drawn: bool = False) -> str:
    """``fig`` as text: its size, its visible texts in drawing order, and each axes' artists
    with the numbers they plot (:func:`_numbers`). ``drawn=True`` says it was just drawn (tick
    labels exist only then)."""
    if not drawn:
        fig.canvas.draw()
    w, h = fig.get_size_inches() * CSS_PX_PER_INCH
    lines = [f"figure {w:.0f} x {h:.0f} px"]
    texts = [t.get_text() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and _on_figure(t, fig)]
    lines.append("text: " + " | ".join(texts))
    for i, ax in enumerate(fig.axes, 1):
        lines.append(f"axes {i}: x {ax.get_xscale()} {_numbers(ax.get_xlim())}; "
                     f"y {ax.get_yscale()} {_numbers(ax.get_ylim())}")
        for artist in ax.get_children():
            data = _data(artist) if artist.get_visible() and artist is not ax.patch else None
            if data is not None:
                label = artist.get_label()
                name = "" if label.startswith("_") else f" {label!r}"
                lines.append(f"  {type(artist).__name__}{name}: {_numbers(data)}")
    return "\n".join(lines)


class FigurePNG:
    """A drawn figure as PNG bytes, displayed at its design width.

    ``_repr_png_`` gives Jupyter and the book the image with ``width`` metadata only, so the
    page shows it ``css_width`` CSS px wide and a narrower screen scales its height with it (a
    fixed height would squash it on a phone). The text form is :func:`describe`'s: what the
    figure shows, which a notebook test compares on any machine.
    """

    def __init__(self, data: bytes, css_width: int, css_height: int, min_text_px: float,
                 description: str = ""):
        self.data, self.css_width, self.css_height = data, css_width, css_height
        self.min_text_px, self.description = min_text_px, description

    def _repr_png_(self):
        return self.data, {"width": self.css_width}

    def __repr__(self) -> str:
        return (f"<figure {self.css_width} x {self.css_height} px, "
                f"smallest text {self.min_text_px:.1f} px>\n{self.description}")


def png(fig) -> FigurePNG:
    """Render ``fig`` (made by :func:`subplots`) as a :class:`FigurePNG`.

    Raises ``ValueError`` if any text is below :data:`MIN_TEXT_PT`, or the figure is wider
    than :data:`MAX_WIDTH` CSS px: such a figure would be unreadable on a phone.
    """
    width_in, height_in = fig.get_size_inches()
    css_width, css_height = round(width_in * CSS_PX_PER_INCH), round(height_in * CSS_PX_PER_INCH)
    if css_width > MAX_WIDTH:
        raise ValueError(f"the figure is {css_width} px wide; at most {MAX_WIDTH} px")
    buf = io.BytesIO()
    # One drawing: savefig lays the figure out, then its text is measured and recorded.
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})  # no version string
    smallest = smallest_text_pt(fig, drawn=True)
    if smallest < MIN_TEXT_PT - 1e-9:
        raise ValueError(f"text of {smallest:g} pt is smaller than {MIN_TEXT_PT:g} pt: "
                         "unreadable on a phone")
    min_text_px = smallest * CSS_PX_PER_INCH / 72
    data = _with_text(buf.getvalue(), {"lneps:css-width": str(css_width),
                                       "lneps:min-text-px": f"{min_text_px:.2f}"})
    return FigurePNG(data, css_width, css_height, min_text_px, describe(fig, drawn=True))


def _with_text(png_bytes: bytes, text: dict) -> bytes:
    """The PNG with a tEXt chunk per key inserted before its image data (PNG spec, 11.3.4.3)."""
    chunks = b""
    for key, value in text.items():
        body = b"tEXt" + key.encode("latin-1") + b"\0" + value.encode("latin-1")
        chunks += struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    at = png_bytes.index(b"IDAT") - 4  # the first image-data chunk starts with its length
    return png_bytes[:at] + chunks + png_bytes[at:]
