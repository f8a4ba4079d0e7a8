"""The chapter "The response figure" (the article's figure): what it quotes, computed
independently.

Every glued number is recomputed here from the closed forms h = t/sqrt(2t^2/3 + eps) and
h' = eps/(2t^2/3 + eps)^(3/2); the chapter must show the figure file it writes, numbered,
at its design width, with the article's caption and alt text.
"""

import math
import re

import pytest

from lneps.book import response as resp
from notebooks import glued, read

NB = "response_figure.ipynb"


def h(t, eps):
    return t / math.sqrt(2 * t * t / 3 + eps)


def dh(t, eps):
    return eps / (2 * t * t / 3 + eps) ** 1.5


@pytest.fixture(scope="module")
def g():
    return glued(NB)


@pytest.fixture(scope="module")
def markdown():
    return "\n".join(c.source for c in read(NB).cells if c.cell_type == "markdown")


def test_limit_and_tail(g):
    assert g["limit"] == pytest.approx(math.sqrt(1.5), rel=1e-15)
    assert g["tail_coefficient"] == pytest.approx(1.5**1.5, rel=1e-15)


def test_eps_set_peaks_and_saturation_points(g):
    assert [g[f"eps_{i}"] for i in range(4)] == [1e-3, 1e-2, 1e-1, 1.0]
    for i in range(4):
        eps = g[f"eps_{i}"]
        assert g[f"peak_{i}"] == pytest.approx(eps**-0.5, rel=1e-14)
        # 90 % of the limit: t^2 = 1.5 eps 0.81/0.19
        assert g[f"t90_{i}"] == pytest.approx(math.sqrt(1.5 * eps * 0.81 / 0.19), rel=1e-14)
        assert h(g[f"t90_{i}"], eps) == pytest.approx(0.9 * math.sqrt(1.5), rel=1e-14)
    # decades: each peak sqrt(10) above the next
    for i in range(3):
        assert g[f"peak_{i}"] / g[f"peak_{i + 1}"] == pytest.approx(math.sqrt(10), rel=1e-14)


def test_edge_of_the_plot(g):
    t_max = g["t_max"]
    assert t_max == resp.T_MAX == 4.0
    assert g["edge_fraction"] == pytest.approx(h(t_max, 1.0) / math.sqrt(1.5), rel=1e-14)
    assert 0.95 < g["edge_fraction"] < 0.96  # "still visibly short of the limit"
    assert g["edge_ratio"] == pytest.approx(dh(t_max, 1.0) / dh(t_max, 1e-3), rel=1e-13)
    assert round(g["edge_ratio"]) == 874
    assert g["sens_min"] == pytest.approx(dh(t_max, 1e-3), rel=1e-13)
    # "span more than <sens_decades> decades": whole decades from the edge value to the peak
    assert g["sens_decades"] == math.floor(math.log10(1e-3**-0.5 / dh(t_max, 1e-3))) == 6
    # "The largest, <eps_largest>": the largest plotted eps, whose curve the edge numbers use
    assert g["eps_largest"] == max(resp.EPS_VALUES) == 1.0


def test_pytorch_default_is_a_step_at_this_scale(g):
    assert g["torch_eps"] == 1e-5
    assert g["torch_peak"] == pytest.approx(1e-5**-0.5, rel=1e-14)
    assert round(g["torch_peak"]) == 316
    assert g["torch_t90"] == pytest.approx(math.sqrt(1.5e-5 * 0.81 / 0.19), rel=1e-14)
    assert g["torch_t90"] < 0.01


def test_numerical_checks(g):
    # lneps is correctly rounded; the closed form evaluated in float64 rounds at each operation:
    # they agree to a float64 ulp of the largest response, sqrt(3/2).
    assert g["worst_response"] <= 2.0**-52 * 1.2248
    assert 0 < g["worst_slope"] < 1e-6


def test_the_book_shows_the_figure_numbered_with_the_articles_caption(markdown):
    assert "```{figure} figures/layer-normalization-epsilon-response.png" in markdown
    assert ":name: fig-response" in markdown and f":width: {resp.WIDTH_PX}px" in markdown
    assert ":alt: Two panels, one above the other." in markdown
    assert "{numref}`fig-response`" in markdown
    assert resp.TITLE + "." in markdown
    # the caption names the plotted eps values (typed in the caption: read them back)
    typed = re.search(r"Drawn for\n\$\\varepsilon = ([^$]*)\$ \(the article's figure", markdown).group(1)
    assert typed == "10^{-3}, 10^{-2}, 10^{-1}, 1"
    as_numbers = [1.0 if x == "1" else 10.0 ** int(re.fullmatch(r"10\^\{(-?\d+)\}", x).group(1))
                  for x in typed.split(", ")]
    assert tuple(as_numbers) == resp.EPS_VALUES
    assert "{cite}`seed000`" in markdown and "{ref}`ch3`" in markdown


def test_the_crossing_point_of_exercise_3(g):
    # eps/(s + eps)^(3/2) equal for eps = 0.01 and 1, s = 2 t^2 / 3, solved independently.
    t = g["cross_t"]
    assert dh(t, 0.01) == pytest.approx(dh(t, 1.0), rel=1e-12)
    assert dh(t / 2, 0.01) > dh(t / 2, 1.0) and dh(2 * t, 0.01) < dh(2 * t, 1.0)
    assert round(t, 4) == 0.2393


def test_the_notebook_writes_the_figure_and_does_not_show_it_twice():
    code = "\n".join(c.source for c in read(NB).cells if c.cell_type == "code")
    assert 'save_response_figure(f"figures/{resp.FIGURE_NAME}"' in code
    for cell in read(NB).cells:
        for out in cell.get("outputs", []):
            assert "image/png" not in out.get("data", {}), "the figure is shown from its file only"
