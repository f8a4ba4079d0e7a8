"""Chapter 1 (seed 003): every seed value, computed here and compared with what the book shows.

Each test computes the value independently with lneps, checks it against the seed's number,
and checks that the notebook glued (quoted in its prose) that same value.
"""

import numpy as np
import pytest

import lneps
from notebooks import glued, stream_text

NB = "ch01_layer_norm_by_hand.ipynb"
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
    tiny = 0.001 * TOKEN
    assert round(tiny.std(), 4) == 0.0022 and tiny.std() < np.sqrt(1e-5)
    assert round(np.sqrt(1e-5), 3) == 0.003
    assert np.round(lneps.layer_norm(tiny), 3).tolist() == [-0.775, -0.258, 0.258, 0.775]
    assert g["tiny_out"] == "[-0.775, -0.258, 0.258, 0.775]"


def test_quarter_scale_moves_the_output_by_less_than_1e4(g):
    spread = (0.25 * TOKEN).std()
    change = np.max(np.abs(lneps.layer_norm(0.25 * TOKEN + 3) - lneps.layer_norm(TOKEN)))
    assert round(spread, 2) == 0.56
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
    assert g["bn_moved"] > 0.1


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
