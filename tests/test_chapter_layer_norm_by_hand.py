"""Chapter 1 (seed 003): every seed value, computed here and compared with what the book shows.

Each test computes the value independently with lneps, checks it against the seed's number,
and checks that the notebook glued (quoted in its prose) that same value.
"""

import math

import numpy as np
import pytest

import lneps
from notebooks import glued, stream_text

NB = "layer_norm_by_hand.ipynb"
TOKEN = np.array([2.0, 4.0, 6.0, 8.0])
SEED_OUTPUT = [-1.342, -0.447, 0.447, 1.342]

# Seed 003's printed output, verbatim.
SEED_PRINTOUT = """\
[[-1.342 -0.447  0.447  1.342]
 [-1.342 -0.447  0.447  1.342]
 [ 0.     0.     0.     0.   ]]
[-1.683  0.106  1.894  3.683]
"""


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def test_worked_example(g):
    assert TOKEN.mean() == 5 and TOKEN.var() == 5
    assert g["ex_mean"] == 5 and g["ex_var"] == 5
    assert np.round(lneps.layer_norm(TOKEN), 3).tolist() == SEED_OUTPUT
    assert g["ex_out"] == "[-1.342, -0.447, 0.447, 1.342]"
    assert round(g["ex_spread"], 3) == 2.236


def test_eps_moves_the_worked_example_only_in_the_sixth_decimal(g):
    shift = np.max(np.abs(lneps.layer_norm(TOKEN) - lneps.layer_norm(TOKEN, eps=0)))
    assert 1e-6 <= shift < 1e-5  # first nonzero digit in the sixth decimal place
    assert g["ex_eps_decimal"] == 6
    assert g["ex_eps_shift"] == pytest.approx(shift, rel=1e-12)


def test_scaled_and_shifted_tokens_give_the_same_output(g):
    for other in (10 * TOKEN, TOKEN + 100):
        assert np.round(lneps.layer_norm(other), 3).tolist() == SEED_OUTPUT
    assert g["times_ten"] == g["plus_hundred"] == g["ex_out"]
    assert g["shift_change"] < 1e-14  # exact up to rounding
    assert 0 < g["scale_change"] < 1e-5  # nearly: eps does not scale


def test_a_spread_below_sqrt_eps_shrinks_the_output(g):
    # The spread of 0.001 * [2, 4, 6, 8] is 0.001 * sqrt(5); sqrt(1e-5) is the default eps's root.
    assert g["tiny_spread"] == pytest.approx(0.001 * math.sqrt(5), rel=1e-14)
    assert g["sqrt_eps"] == pytest.approx(math.sqrt(1e-5), rel=1e-15)
    assert g["tiny_spread"] < g["sqrt_eps"]  # the prose: "below sqrt(eps)"
    # as the prose rounds them (.4f and .3f)
    assert f"{g['tiny_spread']:.4f}" == "0.0022" and f"{g['sqrt_eps']:.3f}" == "0.003"
    assert np.round(lneps.layer_norm(0.001 * TOKEN), 3).tolist() == [-0.775, -0.258, 0.258, 0.775]
    assert g["tiny_out"] == "[-0.775, -0.258, 0.258, 0.775]"


def test_quarter_scale_moves_the_output_by_less_than_1e4(g):
    spread = (0.25 * TOKEN).std()
    change = np.max(np.abs(lneps.layer_norm(0.25 * TOKEN + 3) - lneps.layer_norm(TOKEN)))
    assert g["quarter_spread"] == pytest.approx(0.25 * math.sqrt(5), rel=1e-14)
    assert g["quarter_spread"] == pytest.approx(spread, rel=1e-14)
    assert g["quarter_spread"] > 100 * math.sqrt(1e-5)  # "far above sqrt(eps)"
    assert f"{g['quarter_spread']:.2f}" == "0.56"
    assert change < 1e-4
    assert g["quarter_change"] == pytest.approx(change, rel=1e-9)


def test_constant_token_gives_zeros_then_beta(g):
    assert lneps.layer_norm([5, 5, 5, 5]).tolist() == [0, 0, 0, 0]
    beta = np.array([0.5, -1.0, 2.0, 0.0])
    assert lneps.layer_norm([5, 5, 5, 5], beta=beta).tolist() == beta.tolist()
    assert g["flat_out"] == "[0, 0, 0, 0]"


def test_gain_bias_and_two_number_token(g):
    affine = lneps.layer_norm(TOKEN, np.full(4, 2.0), np.ones(4))
    assert np.round(affine, 3).tolist() == [-1.683, 0.106, 1.894, 3.683]
    assert g["affine_out"] == "[-1.683, 0.106, 1.894, 3.683]"
    assert lneps.layer_norm([0, 3], eps=0).tolist() == [-1, 1]
    assert g["two_out"] == "[-1, 1]"


def test_the_seed_printout_is_reproduced_character_for_character():
    assert SEED_PRINTOUT in stream_text(NB)


def test_row_versus_column(g):
    # Token 1's layer norm uses only token 1: changing token 2 moves it by exactly 0.
    assert g["ln_moved"] == 0.0
    # Batch norm over two tokens a, b: the biased variance of column j is ((a_j - b_j)/2)^2, so
    # token 1 becomes h_j / sqrt(h_j^2 + eps) with h = (a - b)/2. Token 2 goes from
    # [1, 0, 3, 1] to [9, -4, 0, 7] (the notebook's batch).
    a = [2.0, 4.0, 6.0, 8.0]

    def bn_first(b):
        return [(x - y) / 2 / math.sqrt(((x - y) / 2) ** 2 + 1e-5) for x, y in zip(a, b)]

    before, after = bn_first([1.0, 0.0, 3.0, 1.0]), bn_first([9.0, -4.0, 0.0, 7.0])
    want = max(abs(p - q) for p, q in zip(before, after))
    assert g["bn_moved"] == pytest.approx(want, rel=1e-13)
    assert f"{g['bn_moved']:.3f}" == "2.000"  # column 1 flips sign: 0.5 vs -3.5


def test_the_sweep_spans_the_decades_the_prose_quotes(g):
    from notebooks import read

    code = "\n".join(c.source for c in read(NB).cells if c.cell_type == "code")
    assert "k = np.logspace(-5, 2, 400)" in code  # k from 1e-5 to 1e2
    assert g["sweep_decades"] == 2 - (-5)
    markdown = "\n".join(c.source for c in read(NB).cells if c.cell_type == "markdown")
    assert "{glue:text}`sweep_decades:d` decades" in markdown
    assert "seven decades" not in markdown


def test_no_magic_inline_backend_yet_the_sweep_figure_is_stored_as_png():
    from notebooks import read

    first = next(c for c in read(NB).cells if c.cell_type == "code")
    assert "%matplotlib" not in first.source
    # ipykernel's default (inline) backend still renders the glued figure: a real PNG is stored
    import base64

    (png,) = [
        o["data"]["application/papermill.record/image/png"]
        for c in read(NB).cells if c.cell_type == "code" for o in c.outputs
        if o.get("metadata", {}).get("scrapbook", {}).get("name") == "fig_scale_sweep"
    ]
    assert base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_the_scale_sweep_is_a_numbered_figure_with_a_caption():
    from notebooks import read

    nb = read(NB)
    stored = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs
        if o.get("metadata", {}).get("scrapbook", {}).get("name") == "fig_scale_sweep"
    ]
    assert len(stored) == 1
    assert "application/papermill.record/image/png" in stored[0]["data"]
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "```{glue:figure} fig_scale_sweep\n:name: fig-ch1-scale-sweep\n\nThe largest" in markdown
    assert markdown.count("{numref}`fig-ch1-scale-sweep`") == 2


def test_try_it_asks_first_then_answers_in_a_dropdown():
    from notebooks import read

    cells = read(NB).cells
    kinds = [(c.cell_type, c.source) for c in cells]
    ask = next(i for i, (t, s) in enumerate(kinds) if t == "markdown" and "## Try it" in s)
    show = next(i for i, (t, s) in enumerate(kinds) if t == "code" and "token_slider(" in s)
    answer = next(i for i, (t, s) in enumerate(kinds)
                  if t == "markdown" and "{dropdown} Answer" in s and "slider_flip" in s)
    assert ask < show < answer
    assert "**Predict first.**" in kinds[ask][1] and "is there any setting" in kinds[ask][1]
