r"""The response of layer normalization to the input family :math:`(-t, 0, t)`.

For :math:`z = (-t, 0, t)` the mean is 0, :math:`v = z` and :math:`q = 2t^2/3`, so the third
coordinate of the normalized core :math:`u_\varepsilon(z) = v/\sqrt{q+\varepsilon}` is

.. math::

    h_\varepsilon(t) = \frac{t}{\sqrt{2t^2/3 + \varepsilon}}, \qquad
    h'_\varepsilon(t) = \frac{\varepsilon}{(2t^2/3 + \varepsilon)^{3/2}} .

SymPy derives both from the definition (nothing here types them in), together with the limits
:math:`\pm\sqrt{3/2}` and the peak sensitivity :math:`h'_\varepsilon(0) = \varepsilon^{-1/2}`.
The numeric functions draw the two-panel figure of the article "Layer-normalization
epsilon": the response is computed by :func:`lneps.layer_norm` itself, the sensitivity from
the derived closed form. Gains are 1 and biases 0 throughout.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
from pathlib import Path

import matplotlib as mpl
import matplotlib.style
import numpy as np
import sympy as sp
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import plotting
from .._checks import as_float_array, check_eps, check_real
from ..norms import layer_norm
from .symbolic import definition

__all__ = [
    "T",
    "EPSILON",
    "family_statistics",
    "family_core",
    "derive_response",
    "derive_sensitivity",
    "response_limits",
    "peak_sensitivity",
    "tail_coefficient",
    "F",
    "derive_saturation_point",
    "saturation_point",
    "scaling_residuals",
    "core_velocity_at_zero",
    "family",
    "response",
    "sensitivity",
    "EPS_VALUES",
    "T_MAX",
    "N_POINTS",
    "FIGURE_NAME",
    "WIDTH_PX",
    "HEIGHT_PX",
    "FIGSIZE",
    "TITLE",
    "response_figure",
    "save_response_figure",
]

#: The family parameter and the epsilon of the derivations (eps > 0: the family's t = 0 is a
#: constant input, where the core is defined only because eps is positive).
T = sp.Symbol("t", real=True)
EPSILON = sp.Symbol("varepsilon", positive=True)  # printed as the book writes it: \varepsilon


@functools.cache
def family_statistics() -> tuple[sp.Expr, tuple[sp.Expr, ...], sp.Expr]:
    r"""``(mu, v, q)`` of :math:`z = (-t, 0, t)`, from the layer-norm definition.

    :math:`\mu = \frac13\sum_i z_i`, :math:`v = z - \mu\mathbf 1`,
    :math:`q = \frac13\sum_i v_i^2` (biased: divisor d = 3), built by
    :func:`lneps.book.symbolic.definition` from the three entries.
    """
    ln = definition(3, eps=EPSILON, z=(-T, 0, T))
    return ln.mu, ln.v, ln.q


@functools.cache
def family_core() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    r"""The normalized core :math:`u_\varepsilon(-t, 0, t) = v/\sqrt{q+\varepsilon}`."""
    return definition(3, eps=EPSILON, z=(-T, 0, T)).u


@functools.cache
def derive_response() -> sp.Expr:
    r""":math:`h_\varepsilon(t)`: the third coordinate of the core of :math:`(-t, 0, t)`."""
    return family_core()[2]


@functools.cache
def derive_sensitivity() -> sp.Expr:
    r""":math:`h'_\varepsilon(t) = \varepsilon/(2t^2/3+\varepsilon)^{3/2}`, derived.

    SymPy differentiates :math:`h_\varepsilon`; the result is written over the power
    :math:`(q+\varepsilon)^{3/2}` that the quotient rule produces, with the numerator left
    for SymPy to simplify (it finds :math:`\varepsilon`).
    """
    dh = sp.diff(derive_response(), T)
    power = (family_statistics()[2] + EPSILON) ** sp.Rational(3, 2)
    return sp.simplify(dh * power) / power


@functools.cache
def response_limits() -> tuple[sp.Expr, sp.Expr]:
    r"""``(lim_{t->-oo} h, lim_{t->+oo} h)``: :math:`\mp\sqrt{3/2}`, by ``sympy.limit``."""
    h = derive_response()
    return sp.limit(h, T, -sp.oo), sp.limit(h, T, sp.oo)


@functools.cache
def peak_sensitivity() -> sp.Expr:
    r""":math:`h'_\varepsilon(0) = \varepsilon^{-1/2}`: the slope at the constant input."""
    return sp.simplify(derive_sensitivity().subs(T, 0))


@functools.cache
def tail_coefficient() -> sp.Expr:
    r""":math:`\lim_{t\to\infty} t^3 h'_\varepsilon(t) = (3/2)^{3/2}\varepsilon`.

    Far from the constant input the sensitivity decays like :math:`|t|^{-3}` with a factor
    proportional to :math:`\varepsilon`: there a smaller epsilon is the *less* sensitive one.
    """
    return sp.limit(T**3 * derive_sensitivity(), T, sp.oo)


#: The fraction of the limit used to measure how fast the response saturates.
F = sp.Symbol("f", positive=True)


@functools.cache
def derive_saturation_point() -> sp.Expr:
    r"""The :math:`t > 0` where :math:`h_\varepsilon(t) = f\sqrt{3/2}`, for :math:`0 < f < 1`.

    SymPy solves :math:`h_\varepsilon(t) = f \lim_{t\to\infty} h_\varepsilon`; the answer
    is :math:`f\sqrt{3\varepsilon/2}/\sqrt{1-f^2}`, proportional to :math:`\sqrt\varepsilon`.
    """
    t_pos = sp.Symbol("t", positive=True)
    h = derive_response().subs(T, t_pos)
    (root,) = sp.solve(sp.Eq(h, F * response_limits()[1]), t_pos)
    return sp.simplify(root)


def saturation_point(fraction: float, eps: float) -> float:
    """Numeric :func:`derive_saturation_point`: where the response reaches ``fraction`` of its limit."""
    eps = check_eps(eps)
    fraction = check_real(fraction, "fraction")
    if not 0 < fraction < 1:  # also refuses NaN
        raise ValueError(f"fraction must be in (0, 1); got {fraction!r}")
    return float(derive_saturation_point().subs({F: fraction, EPSILON: eps}))


@functools.cache
def scaling_residuals() -> tuple[sp.Expr, sp.Expr]:
    r"""Residuals of :math:`h_\varepsilon(\sqrt\varepsilon s) = h_1(s)` and
    :math:`\sqrt\varepsilon\,h'_\varepsilon(\sqrt\varepsilon s) = h'_1(s)`, simplified.

    Both are 0: every curve is the :math:`\varepsilon = 1` curve with t stretched by
    :math:`\sqrt\varepsilon` (and the sensitivity raised by :math:`\varepsilon^{-1/2}`).
    """
    s = sp.Symbol("s", real=True)
    h, dh = derive_response(), derive_sensitivity()
    root = sp.sqrt(EPSILON)
    return (
        sp.simplify(h.subs(T, root * s) - h.subs({EPSILON: 1}).subs(T, s)),
        sp.simplify(root * dh.subs(T, root * s) - dh.subs({EPSILON: 1}).subs(T, s)),
    )


@functools.cache
def core_velocity_at_zero() -> sp.Matrix:
    r""":math:`\frac{d}{dt}u_\varepsilon(-t, 0, t)` at :math:`t = 0`: :math:`(-1, 0, 1)/\sqrt\varepsilon`.

    The family leaves the constant input along the centered direction :math:`(-1, 0, 1)`, so
    this is the Jacobian :math:`P/\sqrt\varepsilon` applied to that direction.
    """
    return sp.Matrix([sp.simplify(sp.diff(c, T).subs(T, 0)) for c in family_core()])


@functools.cache
def _sensitivity_function():
    # Lambdified once per process: the derivation is the expensive part.
    return sp.lambdify((T, EPSILON), derive_sensitivity(), modules="numpy")


def _real_t(t) -> np.ndarray:
    arr, _ = as_float_array(t, "t")
    if np.iscomplexobj(arr):
        raise TypeError("t must be real")
    return arr.astype(np.float64)


def family(t) -> np.ndarray:
    """The inputs :math:`(-t, 0, t)`, one row per value of ``t``: shape ``t.shape + (3,)``."""
    arr = _real_t(t)
    return np.stack([-arr, np.zeros_like(arr), arr], axis=-1)


def response(t, eps: float) -> np.ndarray:
    r""":math:`h_\varepsilon(t)`, computed by :func:`lneps.layer_norm` (gain 1, bias 0).

    Layer normalization of the rows :math:`(-t, 0, t)`, third coordinate; vectorized in ``t``.
    """
    eps = check_eps(eps)
    return layer_norm(family(t), 1.0, 0.0, eps=eps)[..., 2]


def sensitivity(t, eps: float) -> np.ndarray:
    r""":math:`h'_\varepsilon(t) = \varepsilon/(2t^2/3+\varepsilon)^{3/2}` from the derived form.

    ``eps`` must be positive: at ``eps=0`` the derivative does not exist at t = 0.
    """
    eps = check_eps(eps)
    if eps == 0:
        raise ValueError("eps must be > 0 for the sensitivity: h_0 jumps at t = 0")
    return np.asarray(_sensitivity_function()(_real_t(t), eps), dtype=np.float64)


#: Four decades of epsilon. The curves are one curve stretched by sqrt(eps), so decades space
#: them evenly: each peak is sqrt(10) above the next. 1e-3 is Keras's default.
EPS_VALUES = (1e-3, 1e-2, 1e-1, 1.0)
#: The t range: at |t| = T_MAX even eps = 1 is within 5 % of its limit sqrt(3/2).
T_MAX = 4.0
#: An odd count puts t = 0 (the peak) on the grid exactly.
N_POINTS = 2001
#: The most points :func:`response_figure` draws per curve: far more than a figure can show,
#: and few enough that a mistyped ``n`` cannot exhaust memory.
_MAX_POINTS = 1_000_001
FIGURE_NAME = "layer-normalization-epsilon-response.png"
#: The size the page shows the figure, in CSS px: the two panels stacked, narrow enough that a
#: phone shows its text at 9 px or more (:mod:`lneps.book.plotting`).
WIDTH_PX, HEIGHT_PX = 560, 640
FIGSIZE = (WIDTH_PX / plotting.CSS_PX_PER_INCH, HEIGHT_PX / plotting.CSS_PX_PER_INCH)
#: The article's title for the figure, which the book's caption quotes.
TITLE = "Layer-normalization response and sensitivity for $(-t, 0, t)$; unit gains and zero biases"


def _grid(t_max: float, n: int) -> np.ndarray:
    # Built from the positive half and mirrored: exactly symmetric, with t = 0 exactly on it.
    half = np.linspace(0.0, t_max, (n + 1) // 2)
    return np.concatenate([-half[:0:-1], half])


def response_figure(eps_values=EPS_VALUES, *, t_max: float = T_MAX, n: int = N_POINTS) -> Figure:
    r"""The two-panel figure: :math:`h_\varepsilon(t)` (top) and :math:`h'_\varepsilon(t)`
    (bottom, log scale) for each ``eps_values``, dashed lines at :math:`\pm\sqrt{3/2}`;
    :data:`WIDTH_PX` x :data:`HEIGHT_PX` CSS px in the book's figure style
    (:data:`lneps.book.plotting.STYLE`). Its title is the book's caption, :data:`TITLE`.

    Each data line carries ``gid`` ``"response eps=<eps>"`` or ``"sensitivity eps=<eps>"``, so
    tests can find it; each value of epsilon has its own colour and line style. A bare
    :class:`~matplotlib.figure.Figure` on an Agg canvas (not pyplot): it is not registered
    with pyplot, so a notebook does not show it unless asked, and it is drawn with
    matplotlib's default style whatever the caller's rcParams are.
    """
    eps_values = tuple(check_eps(e) for e in eps_values)
    if not eps_values or min(eps_values) == 0:
        raise ValueError(f"eps_values must be a non-empty sequence of eps > 0; got {eps_values!r}")
    t_max = check_real(t_max, "t_max")
    if not (math.isfinite(t_max) and t_max > 0):
        raise ValueError(f"t_max must be finite and > 0; got {t_max!r}")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n must be an integer; got {type(n).__name__} {n!r}")
    if not 3 <= n <= _MAX_POINTS or n % 2 == 0:
        raise ValueError(
            f"n must be an odd number from 3 to {_MAX_POINTS} (so t = 0 is on the grid); got {n!r}")
    t = _grid(float(t_max), int(n))
    limit = float(response_limits()[1])
    with _style():
        fig = Figure(figsize=FIGSIZE, layout="constrained")
        FigureCanvasAgg(fig)
        ax_h, ax_dh = fig.subplots(2, 1, sharex=True)
        for i, eps in enumerate(eps_values):
            style = dict(color=f"C{i}", ls=_LINESTYLES[i % len(_LINESTYLES)],
                         label=rf"$\varepsilon = {eps:g}$")
            ax_h.plot(t, response(t, eps), gid=f"response eps={eps:g}", **style)
            ax_dh.plot(t, sensitivity(t, eps), gid=f"sensitivity eps={eps:g}", **style)
        # Labels where the curves are not: upper left above +limit, lower right below -limit.
        for sign, name, va, ha in ((-1, "-", "top", "right"), (1, "+", "bottom", "left")):
            ax_h.axhline(sign * limit, color="0.4", ls="--", lw=1, gid=f"limit {name}")
            ax_h.text(-sign * 0.97 * t_max, sign * 1.03 * limit, rf"${name}\sqrt{{3/2}}$",
                      ha=ha, va=va, color="0.3")
        ax_h.set_ylim(-1.35 * limit, 1.35 * limit)
        ax_h.set(ylabel=r"response $h_\varepsilon(t)$")
        ax_dh.set_yscale("log")
        ax_dh.set(xlabel="$t$", ylabel=r"sensitivity $h'_\varepsilon(t)$")
        ax_h.legend(loc="center right")
        for ax in (ax_h, ax_dh):
            ax.set_xlim(-t_max, t_max)
            ax.grid(True, lw=0.5, alpha=0.5)
    return fig


# Line styles that tell the curves apart without colour.
_LINESTYLES = ("-", "--", "-.", ":")


@contextlib.contextmanager
def _style():
    # Matplotlib's defaults under the book's figure sizes, for drawing and for saving alike
    # (tick labels are made when the figure is drawn).
    with mpl.style.context("default"), mpl.rc_context(plotting.STYLE):
        yield


def save_response_figure(path, fig: Figure | None = None) -> Path:
    """Write ``fig`` (default :func:`response_figure`) as PNG to ``path``; return the path.

    The PNG is :func:`lneps.book.plotting.png`'s: twice the design resolution, stamped with the
    design width and the smallest text size, and no metadata that changes between runs or
    versions, so regenerating gives the same file on the same machine.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png; got {str(path)!r}")
    if fig is None:
        fig = response_figure()
    with _style():
        data = plotting.png(fig).data
    # Write then rename: the build and the notebook checks may run this notebook at the same
    # time, and Sphinx must never copy a half-written file.
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    os.replace(partial, path)
    return path
