"""Chapter 1 (the concept unit "Layer normalization"): every number of the source, computed
here and compared with what the book shows.

Each test computes the value independently (with lneps, or written out here), checks it
against the source's number, and checks that the notebook glued (quoted in its prose) that
same value.
"""

import math

import numpy as np
import pytest

import lneps
from notebooks import glued, stream_text

NB = "layer_norm_by_hand.ipynb"
TOKEN = np.array([2.0, 4.0, 6.0, 8.0])
SEED_OUTPUT = [-1.342, -0.447, 0.447, 1.342]  # the concept unit's worked example

# The concept unit's printed output, verbatim.
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
    assert g["ex_diffs"] == "[-3, -1, 1, 3]" and g["ex_squares"] == "9 + 1 + 1 + 9"
    assert np.round(lneps.layer_norm(TOKEN), 3).tolist() == SEED_OUTPUT
    assert g["ex_out"] == "[-1.342, -0.447, 0.447, 1.342]"
    assert round(g["ex_spread"], 3) == 2.236
    # standard deviation just below 1: sqrt(q / (q + eps)) with q = 5
    assert g["ex_out_std"] == pytest.approx(math.sqrt(5 / (5 + 1e-5)), rel=1e-12)
    assert g["ex_out_std"] < 1 and g["ex_out_mean"] == 0


def test_the_recipe_agrees_with_the_package(g):
    assert g["recipe_rows"] == 3
    assert 0 <= g["recipe_gap"] < 1e-15


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


def test_quarter_scale_spread_is_far_above_sqrt_eps(g):
    spread = (0.25 * TOKEN).std()
    assert g["quarter_spread"] == pytest.approx(0.25 * math.sqrt(5), rel=1e-14)
    assert g["quarter_spread"] == pytest.approx(spread, rel=1e-14)
    assert g["quarter_spread"] > 100 * math.sqrt(1e-5)  # "far above sqrt(eps)"
    assert f"{g['quarter_spread']:.2f}" == "0.56"  # the concept unit's 0.56
    change = np.max(np.abs(lneps.layer_norm(0.25 * TOKEN + 3) - lneps.layer_norm(TOKEN)))
    assert change < 1e-4


def test_the_sweep_knee_is_where_the_spread_equals_sqrt_eps(g):
    assert g["sweep_knee"] == pytest.approx(math.sqrt(1e-5 / 5), rel=1e-15)
    assert math.sqrt(5) * g["sweep_knee"] == pytest.approx(math.sqrt(1e-5), rel=1e-14)


def test_a_larger_eps_moves_the_output_two_decimals_earlier(g):
    # Exercise 3: eps = 1e-3 instead of 1e-5 on the worked example.
    with_eps = (TOKEN - 5) / math.sqrt(5 + 1e-3)
    without = (TOKEN - 5) / math.sqrt(5)
    shift = float(np.max(np.abs(with_eps - without)))
    assert g["ex3_shift"] == pytest.approx(shift, rel=1e-9)
    assert g["ex3_decimal"] == 4 == g["ex_eps_decimal"] - 2
    assert g["ex3_relative"] == pytest.approx(1e-3 / 10, rel=1e-15)
    assert g["ex3_out"] == "[" + ", ".join(f"{v:.3f}" for v in with_eps) + "]"


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


def test_batch_norm_differs_in_training_and_in_use(g):
    # The notebook's draws, recomputed: 500 batches of 8 tokens of 4 features.
    rng = np.random.default_rng(7)
    train = rng.normal(loc=[0.0, 5.0, -2.0, 1.0], scale=[1.0, 3.0, 0.5, 2.0], size=(500, 8, 4))
    x = np.array([0.5, 6.0, -2.5, 3.0])

    def training(batch):  # batch normalization from its definition: column statistics
        mu = batch.mean(axis=0)
        return (batch[0] - mu) / np.sqrt(((batch - mu) ** 2).mean(axis=0) + 1e-5)

    a = training(np.vstack([x, train[0, 1:]]))
    b = training(np.vstack([x, train[1, 1:]]))
    flat = train.reshape(-1, 4)
    in_use = (x - flat.mean(axis=0)) / np.sqrt(flat.var(axis=0) + 1e-5)
    assert g["bn_batches"] == 500 and g["bn_batch_size"] == 8
    assert g["bn_train_gap"] == pytest.approx(np.max(np.abs(a - b)), rel=1e-9)
    assert g["bn_use_gap"] == pytest.approx(max(np.max(np.abs(a - in_use)), np.max(np.abs(b - in_use))),
                                            rel=1e-9)
    assert g["bn_train_gap"] > 0.5 and g["bn_use_gap"] > 0.5  # visibly different
    assert g["ln_batch_gap"] == 0.0
    # the notebook uses lneps.batch_norm(training=False, ...), checked against the definition
    assert g["bn_use_vs_definition"] < 1e-15


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
        if o.get("metadata", {}).get("scrapbook", {}).get("name") == "fig-ch1-scale-sweep"
    ]
    assert base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_the_scale_sweep_is_a_numbered_figure_with_a_caption():
    from notebooks import read

    nb = read(NB)
    stored = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs
        if o.get("metadata", {}).get("scrapbook", {}).get("name") == "fig-ch1-scale-sweep"
    ]
    assert len(stored) == 1
    assert "application/papermill.record/image/png" in stored[0]["data"]
    # drawn by lneps.book.plotting: shown 560 px wide, the PNG at twice that
    assert stored[0]["metadata"]["image/png"] == {"width": 560}  # the height follows the width on a phone
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "```{glue:figure} fig-ch1-scale-sweep\n:name: fig-ch1-scale-sweep\n:alt: " in markdown
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
    asked = " ".join(kinds[ask][1].split())
    assert "**Predict first.**" in asked and "is there any setting" in asked
