"""lneps.book.response: the (-t, 0, t) family derived by SymPy, computed by lneps, and drawn.

The SymPy results are compared with the article's closed forms by proving the difference is
0; the numeric functions and the data of the plotted lines are compared with those closed
forms evaluated independently in NumPy; the regenerated figure is compared with the
committed PNG, and its size and text with what the book's layout needs.
"""

import math

import numpy as np
import pytest
import sympy as sp
from matplotlib.testing.compare import compare_images
from PIL import Image

import lneps
from lneps.book import plotting
from lneps.book import response as resp
from notebooks import BOOK

t, eps = resp.T, resp.EPSILON
FIGURE = BOOK / "figures" / resp.FIGURE_NAME

# The article's formulas, typed here (and only here) to check what SymPy derived.
ARTICLE_H = t / sp.sqrt(2 * t**2 / 3 + eps)
ARTICLE_DH = eps / (2 * t**2 / 3 + eps) ** sp.Rational(3, 2)


def h_closed(x, e):
    return x / np.sqrt(2 * x**2 / 3 + e)


def dh_closed(x, e):
    return e / (2 * x**2 / 3 + e) ** 1.5


# --- SymPy ------------------------------------------------------------------------------

def test_statistics_of_the_family():
    mu, v, q = resp.family_statistics()
    assert mu == 0
    assert v == (-t, 0, t)
    assert sp.simplify(q - 2 * t**2 / 3) == 0


def test_derived_response_is_the_articles():
    assert sp.simplify(resp.derive_response() - ARTICLE_H) == 0
    core = resp.family_core()
    assert sp.simplify(core[0] + ARTICLE_H) == 0 and core[1] == 0


def test_derived_sensitivity_is_the_articles_and_the_derivative():
    dh = resp.derive_sensitivity()
    assert sp.simplify(dh - ARTICLE_DH) == 0
    assert sp.simplify(dh - sp.diff(ARTICLE_H, t)) == 0
    # Written over (q + eps)^(3/2) with the numerator eps, as the article writes it.
    assert sp.simplify(dh * (2 * t**2 / 3 + eps) ** sp.Rational(3, 2)) == eps


def test_limits_are_plus_minus_sqrt_three_halves():
    lo, hi = resp.response_limits()
    assert hi == sp.sqrt(6) / 2 and lo == -sp.sqrt(6) / 2
    assert sp.simplify(hi - sp.sqrt(sp.Rational(3, 2))) == 0


def test_peak_sensitivity_is_inverse_sqrt_eps():
    assert sp.simplify(resp.peak_sensitivity() - eps ** sp.Rational(-1, 2)) == 0
    # and it is the maximum: h' is decreasing in |t|
    dh = resp.derive_sensitivity()
    assert sp.solve(sp.diff(dh, t), t) == [0]


def test_tail_coefficient():
    assert sp.simplify(resp.tail_coefficient() - sp.Rational(3, 2) ** sp.Rational(3, 2) * eps) == 0


def test_curves_are_one_curve_stretched_by_sqrt_eps():
    assert resp.scaling_residuals() == (0, 0)


def test_saturation_point():
    t_f = resp.derive_saturation_point()
    f = resp.F
    assert sp.simplify(t_f**2 - 3 * eps * f**2 / (2 * (1 - f**2))) == 0
    # the response at t_f is f times its limit
    assert sp.simplify(ARTICLE_H.subs(t, t_f) - f * sp.sqrt(6) / 2) == 0
    assert resp.saturation_point(0.9, 0.01) == pytest.approx(math.sqrt(1.5 * 0.01 * 0.81 / 0.19))
    assert h_closed(resp.saturation_point(0.5, 0.3), 0.3) == pytest.approx(0.5 * math.sqrt(1.5))


def test_core_velocity_at_zero_attains_the_lipschitz_bound():
    vel = resp.core_velocity_at_zero()
    assert sp.simplify(vel - sp.Matrix([-1, 0, 1]) / sp.sqrt(eps)) == sp.zeros(3, 1)
    assert sp.simplify(vel.norm() / sp.sqrt(2) - 1 / sp.sqrt(eps)) == 0


def test_the_family_is_built_by_the_shared_definition():
    # The chapter's derivations start from lneps.book.symbolic.definition, not a second copy of the
    # formulas: its core on (-t, 0, t) is exactly the family core used here.
    from lneps.book.symbolic import definition

    ln = definition(3, eps=eps, z=(-t, 0, t))
    assert tuple(resp.family_core()) == tuple(ln.u)
    assert resp.derive_response() == ln.u[2]


# --- numeric ----------------------------------------------------------------------------

SAMPLES = np.array([-7.5, -2.0, -0.3, -1e-3, 0.0, 1e-4, 0.05, 0.7, 3.0, 40.0])


@pytest.mark.parametrize("e", [1e-5, 1e-3, 0.1, 1.0, 2.5])
def test_response_and_sensitivity_match_the_closed_forms(e):
    np.testing.assert_allclose(resp.response(SAMPLES, e), h_closed(SAMPLES, e), rtol=1e-14, atol=0)
    np.testing.assert_allclose(resp.sensitivity(SAMPLES, e), dh_closed(SAMPLES, e), rtol=1e-13)
    assert resp.sensitivity(0.0, e) == pytest.approx(e**-0.5, rel=1e-15)


def test_response_is_layer_norm_of_the_family():
    x = np.linspace(-2, 2, 7)
    rows = resp.family(x)
    assert rows.shape == (7, 3)
    np.testing.assert_array_equal(rows[:, 1], 0)
    np.testing.assert_array_equal(resp.response(x, 0.2), lneps.layer_norm(rows, eps=0.2)[:, 2])
    # shape follows t
    assert resp.response(np.ones((2, 4)), 0.1).shape == (2, 4)
    assert resp.sensitivity(np.ones((2, 4)), 0.1).shape == (2, 4)


def test_sensitivity_is_the_slope_of_the_computed_response():
    x = np.linspace(-3, 3, 61)
    step = 1e-5  # truncation (step^2/eps) and rounding (1e-16/step/h') both below 1e-6
    for e in resp.EPS_VALUES:
        slope = (resp.response(x + step, e) - resp.response(x - step, e)) / (2 * step)
        np.testing.assert_allclose(slope, resp.sensitivity(x, e), rtol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="eps"):
        resp.response(1.0, -1)
    with pytest.raises(ValueError, match="eps must be > 0"):
        resp.sensitivity(1.0, 0)
    with pytest.raises(TypeError, match="t must be"):
        resp.response(["a"], 0.1)
    with pytest.raises(TypeError, match="t must be real"):
        resp.response(1j, 0.1)
    with pytest.raises(ValueError, match="fraction"):
        resp.saturation_point(1.0, 0.1)
    with pytest.raises(ValueError, match="eps_values"):
        resp.response_figure([0.1, 0.0])
    with pytest.raises(ValueError, match="n must be"):
        resp.response_figure(n=100)


@pytest.mark.parametrize("fraction, error, message", [
    ("0.5", TypeError, "fraction must be a real number"),
    (np.array([0.5, 0.9]), TypeError, "fraction must be a real number"),
    ([0.5], TypeError, "fraction must be a real number"),
    (None, TypeError, "fraction must be a real number"),
    (True, TypeError, "fraction must be a real number"),
    (float("nan"), ValueError, r"fraction must be in \(0, 1\)"),
    (0.0, ValueError, r"fraction must be in \(0, 1\)"),
])
def test_saturation_point_names_a_bad_fraction(fraction, error, message):
    with pytest.raises(error, match=message):
        resp.saturation_point(fraction, 0.1)


def test_saturation_point_accepts_numpy_scalars():
    want = math.sqrt(1.5 * 0.1 * 0.81 / 0.19)
    assert resp.saturation_point(np.float64(0.9), 0.1) == pytest.approx(want, rel=1e-14)
    assert resp.saturation_point(np.float32(0.5), np.float32(0.5)) == pytest.approx(
        math.sqrt(1.5 * 0.5 * 0.25 / 0.75), rel=1e-6)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"t_max": math.inf}, ValueError, "t_max must be finite and > 0"),
    ({"t_max": math.nan}, ValueError, "t_max must be finite and > 0"),
    ({"t_max": -1.0}, ValueError, "t_max must be finite and > 0"),
    ({"t_max": "4"}, TypeError, "t_max must be a real number"),
    ({"t_max": True}, TypeError, "t_max must be a real number"),
    ({"n": "101"}, TypeError, "n must be an integer"),
    ({"n": 101.0}, TypeError, "n must be an integer"),
    ({"n": None}, TypeError, "n must be an integer"),
    ({"n": 1}, ValueError, "n must be an odd number from 3"),
    ({"n": 10**9 + 1}, ValueError, "n must be an odd number from 3"),
])
def test_response_figure_names_a_bad_range(kwargs, error, message):
    with pytest.raises(error, match=message):
        resp.response_figure(**kwargs)


def test_response_figure_accepts_numpy_scalars_for_the_range():
    small = resp.response_figure((0.1,), t_max=np.float32(2.0), n=np.int64(5))
    (line,) = _lines(small, "response").values()
    assert list(line.get_xdata()) == [-2.0, -1.0, 0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="png"):
        resp.save_response_figure("figure.svg")


# --- the figure -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fig():
    return resp.response_figure()


def _lines(fig, prefix):
    return {ln.get_gid(): ln for ax in fig.axes for ln in ax.get_lines()
            if (ln.get_gid() or "").startswith(prefix)}


def test_figure_layout_and_size(fig):
    assert len(fig.axes) == 2
    assert "unit gains and zero biases" in resp.TITLE and "$(-t, 0, t)$" in resp.TITLE
    # Drawn at the size the page shows it, narrow enough for a phone (lneps.book.plotting).
    assert tuple(fig.get_size_inches()) == resp.FIGSIZE == (5.6, 6.4)
    assert resp.WIDTH_PX <= plotting.MAX_WIDTH
    assert plotting.smallest_text_pt(fig) >= plotting.MIN_TEXT_PT
    assert fig.axes[1].get_yscale() == "log"
    # Stacked: the response above the sensitivity, sharing t.
    top, bottom = (ax.get_position() for ax in fig.axes)
    assert top.y0 > bottom.y1


def test_each_epsilon_has_its_own_colour_and_line_style(fig):
    lines = _lines(fig, "response").values()
    assert len({ln.get_color() for ln in lines}) == len({ln.get_linestyle() for ln in lines}) == len(resp.EPS_VALUES)


@pytest.mark.parametrize("kind, closed", [("response", h_closed), ("sensitivity", dh_closed)])
def test_plotted_data_match_the_closed_forms(fig, kind, closed):
    lines = _lines(fig, kind)
    assert sorted(lines) == sorted(f"{kind} eps={e:g}" for e in resp.EPS_VALUES)
    for e in resp.EPS_VALUES:
        ln = lines[f"{kind} eps={e:g}"]
        x, y = np.asarray(ln.get_xdata()), np.asarray(ln.get_ydata())
        assert x[0] == -resp.T_MAX and x[-1] == resp.T_MAX and 0.0 in x
        np.testing.assert_allclose(y, closed(x, e), rtol=1e-13, atol=1e-300)
        # sample points: t = 0 and the ends
        assert y[x == 0.0][0] == pytest.approx(0.0 if kind == "response" else e**-0.5, abs=1e-15)
        assert y[-1] == pytest.approx(closed(resp.T_MAX, e), rel=1e-14)


def test_dashed_lines_at_plus_minus_sqrt_three_halves(fig):
    limits = _lines(fig, "limit")
    assert len(limits) == 2
    levels = sorted(ln.get_ydata()[0] for ln in limits.values())
    assert levels == pytest.approx([-math.sqrt(1.5), math.sqrt(1.5)], rel=1e-15)
    assert all(ln.get_linestyle() == "--" for ln in limits.values())
    assert all(ln.axes is fig.axes[0] for ln in limits.values())


def test_regenerated_figure_matches_the_committed_png(tmp_path):
    assert FIGURE.exists(), "run `make notebooks NB=book/response_figure.ipynb`"
    new = resp.save_response_figure(tmp_path / resp.FIGURE_NAME)
    assert compare_images(str(FIGURE), str(new), tol=0.5) is None


def test_the_png_records_its_size_for_the_page():
    # Twice the design resolution, stamped with the design width and the smallest text.
    image = Image.open(FIGURE)
    assert image.size == (2 * resp.WIDTH_PX, 2 * resp.HEIGHT_PX)
    assert image.info["lneps:css-width"] == str(resp.WIDTH_PX)
    assert float(image.info["lneps:min-text-px"]) >= plotting.MIN_TEXT_PT * 100 / 72 - 0.01


def test_saving_twice_gives_the_same_bytes(tmp_path, fig):
    a = resp.save_response_figure(tmp_path / "a.png", fig)
    b = resp.save_response_figure(tmp_path / "b.png", fig)
    assert a.read_bytes() == b.read_bytes()
    assert b"Matplotlib" not in a.read_bytes()  # no version stamp in the metadata
