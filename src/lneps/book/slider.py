r"""The concept unit's "Try it" slider: the token :math:`k\cdot[2, 4, 6, 8] + c` and its layer norm.

The slider is one self-contained block of HTML: two range inputs (k and c), a left panel of
bars for the token and a right panel of bars for :math:`\operatorname{LN}_\varepsilon` of it
with :math:`\gamma = 1`, :math:`\beta = 0`, each on a fixed value axis with tick labels, each
bar labelled with its value. Its script and style are the files ``book/_static/lneps-slider.js``
and ``lneps-slider.css``, inlined into the block.

Every normalized value the slider can show is computed here, with
:func:`lneps.layer_norm`, on the slider's whole grid of (k, c) settings, and embedded in the
page as JSON. The page's script only looks values up and draws bars; it computes no
normalization. So the slider works in a static page with no kernel and no network, works in a
live (trusted) notebook, and shows exactly what ``lneps.layer_norm`` returns, rounded for
display. The markup is deterministic (no random ids), so a stored output compares equal when
the notebook is re-run.
"""

from __future__ import annotations

import json
import math
import numbers
from html import escape
from pathlib import Path

import numpy as np

from .._checks import check_eps
from ..norms import layer_norm

__all__ = [
    "BASE_TOKEN", "grid_axis", "check_grid", "check_digits", "slider_values", "nice_axis",
    "TokenSlider", "token_slider",
]

BASE_TOKEN = (2.0, 4.0, 6.0, 8.0)
"""The concept unit's token [2, 4, 6, 8]; the slider shows ``k * BASE_TOKEN + c``."""


def grid_axis(lo: float, hi: float, step: float, name: str = "axis") -> np.ndarray:
    """The slider positions ``lo, lo + step, ..., hi`` (both ends included).

    ``hi - lo`` must be a whole number of steps, so the browser's range input (which snaps
    to ``min + n * step``) lands exactly on a grid point.
    """
    for label, value in (("lo", lo), ("hi", hi), ("step", step)):
        # numbers.Real admits NumPy scalars (np.float32, np.int64); bool is a Real we refuse.
        number = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
        if not number or not math.isfinite(value):
            raise TypeError(f"{name}: {label} must be a finite number; got {value!r}")
    lo, hi, step = float(lo), float(hi), float(step)
    if step <= 0:
        raise ValueError(f"{name}: step must be > 0; got {step!r}")
    if hi < lo:
        raise ValueError(f"{name}: hi ({hi!r}) must be >= lo ({lo!r})")
    n = (hi - lo) / step
    if abs(n - round(n)) > 1e-9:
        raise ValueError(f"{name}: hi - lo = {hi - lo!r} is not a whole number of steps {step!r}")
    return lo + step * np.arange(round(n) + 1, dtype=np.float64)


def check_grid(axis, name: str) -> np.ndarray:
    """``axis`` as a float64 array, checked to be a grid the page script can index.

    The script maps a slider position to an index with ``(value - axis[0]) / step`` where
    ``step = axis[1] - axis[0]``, so the axis must be 1-D, finite, strictly ascending and
    evenly spaced (to 1e-9 of a step), with at least 2 points.
    """
    try:
        arr = np.asarray(axis, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D sequence of real numbers; got {axis!r}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {arr.shape}")
    if arr.size < 2:
        raise ValueError(f"{name} must have at least 2 points (a slider needs a step); got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite; got {arr.tolist()!r}")
    gaps = np.diff(arr)
    if not np.all(gaps > 0):
        raise ValueError(f"{name} must be strictly ascending")
    if np.max(np.abs(gaps - gaps[0])) > 1e-9 * gaps[0]:
        raise ValueError(f"{name} must be evenly spaced; steps range from {gaps.min()!r} to {gaps.max()!r}")
    return arr


def check_digits(digits) -> int:
    """``digits``, the decimals shown, as an int in 0..20 (the range of JavaScript's toFixed)."""
    if isinstance(digits, (bool, np.bool_)) or not isinstance(digits, numbers.Integral):
        raise TypeError(f"digits must be an integer; got {type(digits).__name__} {digits!r}")
    if not 0 <= digits <= 20:
        raise ValueError(f"digits must be in 0..20 (JavaScript's toFixed); got {digits!r}")
    return int(digits)


def slider_values(ks, cs, token=BASE_TOKEN, *, eps: float = 1e-5, digits: int = 3) -> np.ndarray:
    r"""``out[i, j] = round(layer_norm(ks[i] * token + cs[j], eps=eps), digits)``.

    Shape ``(len(ks), len(cs), len(token))``; :math:`\gamma = 1`, :math:`\beta = 0`.
    Rounded to the ``digits`` decimals the slider prints (negative zero becomes 0), so the
    page stores no more digits than it shows and never rounds a second time.
    """
    eps = check_eps(eps)
    digits = check_digits(digits)
    ks = np.asarray(ks, dtype=np.float64).reshape(-1)
    cs = np.asarray(cs, dtype=np.float64).reshape(-1)
    t = np.asarray(token, dtype=np.float64).reshape(-1)
    tokens = ks[:, None, None] * t + cs[None, :, None]  # every (k, c) setting at once
    return np.round(layer_norm(tokens, eps=eps), digits) + 0.0


def _number(x: float) -> float | int:
    # JSON's shortest form: 3.0 -> 3, -0.25 stays -0.25, so the page stays small.
    x = float(x) + 0.0
    return int(x) if x.is_integer() else x


# The page's script and style live in book/_static (lneps-slider.js, lneps-slider.css) and
# are inlined into the block, so that the stored output works on its own: in the book, in a
# live notebook, offline.
STATIC = Path(__file__).resolve().parents[3] / "book" / "_static"


def _asset(name: str) -> str:
    path = STATIC / name
    if not path.is_file():
        raise FileNotFoundError(f"the slider's {name} is missing: expected {path} (lneps.book.slider "
                                "runs from the book's repository, installed with pip install -e)")
    return path.read_text(encoding="utf-8").strip()


# Nice axis ends and their tick steps, as mantissas of a power of ten.
_NICE = ((1, 0.5), (1.5, 0.5), (2, 1), (3, 1), (4, 2), (5, 2.5), (6, 2), (8, 4), (10, 5))


def nice_axis(largest: float) -> dict:
    """A symmetric value axis covering ``[-largest, largest]``: its end and its ticks.

    ``nice_axis(20) == {"max": 20, "ticks": [-20, -10, 0, 10, 20]}``; the end is the
    smallest of 1, 1.5, 2, 3, 4, 5, 6, 8 times a power of ten that is at least ``largest``.
    """
    if not (isinstance(largest, numbers.Real) and math.isfinite(largest)) or largest < 0:
        raise ValueError(f"largest must be a finite number >= 0; got {largest!r}")
    if largest == 0:
        largest = 1.0
    power = 10.0 ** math.floor(math.log10(largest))
    for mantissa, step in _NICE:
        if mantissa * power >= largest * (1 - 1e-12):
            end, step = round(mantissa * power, 12), step * power
            break
    n = round(end / step)
    return {"max": _number(end), "ticks": [_number(round(i * step, 12)) for i in range(-n, n + 1)]}


def _panel(role: str, title: str, d: int) -> str:
    cols = "".join('<div class="lneps-col"><div class="lneps-bar"></div></div>' for _ in range(d))
    vals = "".join('<span class="lneps-val"></span>' for _ in range(d))
    return (
        f'<figure class="lneps-panel" data-role="{role}">'
        f'<figcaption class="lneps-title">{title}</figcaption>'
        '<div class="lneps-plot"><div class="lneps-axis"></div>'
        f'<div class="lneps-bars">{cols}</div></div>'
        f'<div class="lneps-vals">{vals}</div></figure>'
    )


class TokenSlider:
    """The slider as HTML; notebooks display it through ``_repr_html_``.

    Attributes ``ks``, ``cs`` (the grid), ``values`` (:func:`slider_values` on that grid),
    ``eps`` and ``digits`` are what the page embeds.
    """

    def __init__(self, ks, cs, *, token=BASE_TOKEN, eps=1e-5, digits=3, k0=1.0, c0=0.0,
                 element_id="lneps-slider"):
        self.ks = check_grid(ks, "ks")
        self.cs = check_grid(cs, "cs")
        self.token = tuple(float(t) for t in token)
        self.eps = check_eps(eps)
        self.digits = check_digits(digits)
        if not (np.any(self.ks == k0) and np.any(self.cs == c0)):
            raise ValueError(f"the start (k0={k0!r}, c0={c0!r}) must be a grid point")
        if not isinstance(element_id, str) or not element_id.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"element_id must be letters, digits, '-' or '_'; got {element_id!r}")
        self.k0, self.c0, self.element_id = float(k0), float(c0), element_id
        self.values = slider_values(self.ks, self.cs, self.token, eps=self.eps, digits=self.digits)

    def _step(self, axis: np.ndarray) -> float:
        # check_grid guarantees at least 2 evenly spaced points.
        return float(axis[1] - axis[0])

    def data(self) -> dict:
        """What the page embeds: the grid, the token, the two value axes and every
        normalized value (flat)."""
        kstep, cstep = self._step(self.ks), self._step(self.cs)
        xmax = float(np.max(np.abs(self.ks[:, None, None] * np.array(self.token)
                                   + self.cs[None, :, None])))
        return {
            "k": [_number(self.ks[0]), _number(self.ks[-1])], "kstep": _number(kstep),
            "c": [_number(self.cs[0]), _number(self.cs[-1])], "cstep": _number(cstep),
            "nk": int(self.ks.size), "nc": int(self.cs.size),
            "token": [_number(t) for t in self.token], "eps": self.eps, "digits": self.digits,
            # Fixed scales for every setting: the largest token entry on the grid, and the
            # largest normalized value (nanmax: with eps=0 the constant token gives NaN).
            "xaxis": nice_axis(xmax),
            "yaxis": nice_axis(float(np.nanmax(np.abs(self.values)))),
            "y": [_number(v) for v in self.values.reshape(-1)],
        }

    def html(self) -> str:
        """The whole block: style, controls, the two panels, the data and the script."""
        kstep, cstep = self._step(self.ks), self._step(self.cs)
        token = ", ".join(f"{_number(t)}" for t in self.token)
        data = json.dumps(self.data(), separators=(",", ":"))

        def slider(name, axis, step, start):
            return (
                f'<label>{name} <input type="range" data-role="{name}" aria-label="{name}" '
                f'min="{_number(axis[0])}" max="{_number(axis[-1])}" step="{_number(step)}" '
                f'value="{_number(start)}"><output data-role="{name}-value">{_number(start)}'
                "</output></label>"
            )

        return (
            f'<div class="lneps-slider" id="{escape(self.element_id)}">'
            f"<style>{_asset('lneps-slider.css')}</style>"
            '<p data-role="nojs"><em>This slider needs JavaScript: in a notebook, run the cell '
            "(or trust the notebook).</em></p>"
            '<div class="lneps-controls">'
            f"{slider('k', self.ks, kstep, self.k0)}{slider('c', self.cs, cstep, self.c0)}</div>"
            '<div class="lneps-panels">'
            f"{_panel('token', f'The token k × [{token}] + c', len(self.token))}"
            f"{_panel('normalized', 'After layer normalization (γ = 1, β = 0)', len(self.token))}"
            f'</div><script type="application/json" data-role="data">{data}</script>'
            f"<script>{_asset('lneps-slider.js')}</script></div>"
        )

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return (
            f"TokenSlider(k from {_number(self.ks[0])} to {_number(self.ks[-1])} step "
            f"{_number(self._step(self.ks))}, c from {_number(self.cs[0])} to "
            f"{_number(self.cs[-1])} step {_number(self._step(self.cs))}, eps={self.eps:g})"
        )


def token_slider(k=(-2.0, 2.0, 0.25), c=(-4.0, 4.0, 0.5), *, eps=1e-5, digits=3,
                 k0=1.0, c0=0.0, element_id="lneps-slider") -> TokenSlider:
    """The concept unit's slider: ``k`` and ``c`` are ``(lo, hi, step)`` ranges (ends included).

    The default k range runs through negative values and 0 in steps of 0.25; c runs from
    -4 to 4 in steps of 0.5, so that the token's axis (up to 2 * 8 + 4 = 20) keeps the bars
    of k = 1 readable. The page embeds ``len(k) * len(c) * 4`` normalized values.
    """
    ks = grid_axis(*k, name="k")
    cs = grid_axis(*c, name="c")
    return TokenSlider(ks, cs, eps=eps, digits=digits, k0=k0, c0=c0, element_id=element_id)
