"""The "Try it" slider's data and markup (lneps.book.slider), without a browser.

tests/rendered/test_browser.py drives the rendered slider in Chromium; these tests pin what it embeds:
the grid, every normalized value (against lneps.layer_norm), and deterministic markup.
"""

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lneps
from lneps.book.slider import BASE_TOKEN, TokenSlider, grid_axis, nice_axis, slider_values, token_slider
from notebooks import glued, read

NB = "layer_norm_by_hand.ipynb"


def embedded_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" data-role="data">(\{.*?\})</script>', html)
    assert match, "the slider's data literal is missing"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def slider():
    return token_slider()


def test_grid_runs_through_negative_k_zero_and_the_seed_settings(slider):
    assert slider.ks.min() < 0 and 0.0 in slider.ks and 0.25 in slider.ks
    assert {1.0, -1.0} <= set(slider.ks.tolist())
    assert {0.0, 3.0, 4.0, -4.0} <= set(slider.cs.tolist())
    assert slider.values.shape == (17, 17, 4)


def test_grid_axis_includes_both_ends_and_rejects_a_ragged_range():
    assert grid_axis(-2, 2, 0.25).tolist() == [-2 + 0.25 * i for i in range(17)]
    assert grid_axis(-100, 100, 1).tolist()[::100] == [-100, 0, 100]
    with pytest.raises(ValueError, match="whole number of steps"):
        grid_axis(0, 1, 0.3, name="k")
    with pytest.raises(ValueError, match="k: step must be > 0"):
        grid_axis(0, 1, 0, name="k")
    with pytest.raises(TypeError, match="c: lo must be a finite number"):
        grid_axis(float("nan"), 1, 1, name="c")


def test_grid_axis_accepts_numpy_scalars_and_refuses_bools():
    want = [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert grid_axis(np.float32(-1), np.int64(1), np.float64(0.5)).tolist() == want
    assert grid_axis(np.int32(-1), 1, np.float32(0.5)).dtype == np.float64
    with pytest.raises(TypeError, match="k: hi must be a finite number"):
        grid_axis(0, True, 1, name="k")
    with pytest.raises(TypeError, match="k: step must be a finite number"):
        grid_axis(0, 1, np.bool_(True), name="k")
    with pytest.raises(TypeError, match="c: hi must be a finite number"):
        grid_axis(0, np.float64("inf"), 1, name="c")
    with pytest.raises(TypeError, match="c: lo must be a finite number"):
        grid_axis("0", 1, 1, name="c")


# Each bad grid would make the page script (which indexes with ks[1] - ks[0]) show wrong
# values or fail; the constructor must refuse it and name the axis.
@pytest.mark.parametrize("bad, message", [
    ([1.0, 0.0, -1.0], "ks must be strictly ascending"),
    ([0.0, 0.0, 1.0], "ks must be strictly ascending"),
    ([-1.0, 1.0, 0.0], "ks must be strictly ascending"),
    ([0.0, 1.0, 3.0], "ks must be evenly spaced"),
    ([0.0, 0.25, 0.5, 1.0], "ks must be evenly spaced"),
    ([[0.0, 1.0], [2.0, 3.0]], r"ks must be 1-D; got shape \(2, 2\)"),
    ([], "ks must have at least 2 points"),
    ([1.0], "ks must have at least 2 points"),
    ([0.0, 1.0, np.nan], "ks must be finite"),
])
def test_the_grid_must_be_ascending_evenly_spaced_and_1d(bad, message):
    with pytest.raises(ValueError, match=message):
        TokenSlider(bad, [0.0, 1.0], k0=1.0)
    with pytest.raises(ValueError, match=message.replace("ks", "cs")):
        TokenSlider([0.0, 1.0], bad, k0=1.0, c0=1.0)


def test_a_non_numeric_grid_is_a_type_error():
    with pytest.raises(TypeError, match="ks must be a 1-D sequence of real numbers"):
        TokenSlider(["a", "b"], [0.0, 1.0], k0=0.0)


def test_a_grid_from_float_steps_is_accepted_and_indexed_by_its_first_step():
    # 0.1 * i is not exactly evenly spaced in binary; rounding must not be mistaken for a gap.
    ks = 0.1 * np.arange(21)
    s = TokenSlider(ks, [0.0, 1.0], k0=0.0)
    data = s.data()
    assert data["kstep"] == pytest.approx(0.1, rel=1e-12) and data["nk"] == 21
    assert [data["k"][0] + i * data["kstep"] for i in range(21)] == pytest.approx(ks.tolist())


@pytest.mark.parametrize("digits, error, message", [
    (-1, ValueError, "digits must be in 0..20"),
    (21, ValueError, "digits must be in 0..20"),
    (2.5, TypeError, "digits must be an integer"),
    ("3", TypeError, "digits must be an integer"),
    (True, TypeError, "digits must be an integer"),
])
def test_digits_must_be_an_integer_that_tofixed_accepts(digits, error, message):
    with pytest.raises(error, match=message):
        TokenSlider([0.0, 1.0], [0.0, 1.0], k0=0.0, digits=digits)
    with pytest.raises(error, match=message):
        slider_values([1.0], [0.0], digits=digits)


def test_digits_at_the_ends_of_the_range():
    assert TokenSlider([0.0, 1.0], [0.0, 1.0], k0=1.0, digits=0).values[1, 0].tolist() == [-1, 0, 0, 1]
    wide = TokenSlider([0.0, 1.0], [0.0, 1.0], k0=1.0, digits=np.int64(20))
    assert wide.digits == 20 and type(wide.digits) is int
    # 20 decimals keep every digit a float64 has (np.round may move the last bit)
    np.testing.assert_allclose(wide.values[1, 0], lneps.layer_norm(np.array(BASE_TOKEN)), rtol=1e-15)


def test_the_seed_points_equal_layer_norm(slider):
    token = np.array(BASE_TOKEN)
    for k, c, expected in [
        (1.0, 0.0, [-1.342, -0.447, 0.447, 1.342]),
        (-1.0, 0.0, [1.342, 0.447, -0.447, -1.342]),
        (0.0, 3.0, [0.0, 0.0, 0.0, 0.0]),
        (0.25, 4.0, [-1.342, -0.447, 0.447, 1.342]),
    ]:
        i, j = np.flatnonzero(slider.ks == k)[0], np.flatnonzero(slider.cs == c)[0]
        assert slider.values[i, j].tolist() == expected
        assert np.round(lneps.layer_norm(k * token + c), 3).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(
    ks=st.lists(st.floats(-50, 50, allow_nan=False), min_size=1, max_size=4),
    cs=st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=4),
    eps=st.sampled_from([0.0, 1e-5, 1e-3]),
)
def test_slider_values_are_rounded_layer_norms(ks, cs, eps):
    got = slider_values(ks, cs, eps=eps)
    for i, k in enumerate(ks):
        for j, c in enumerate(cs):
            want = np.round(lneps.layer_norm(k * np.array(BASE_TOKEN) + c, eps=eps), 3) + 0.0
            np.testing.assert_array_equal(got[i, j], want)


def test_no_negative_zero_is_stored(slider):
    assert not np.any(np.signbit(slider.values) & (slider.values == 0))


def test_the_page_embeds_exactly_the_values(slider):
    data = embedded_data(slider.html())
    assert (data["nk"], data["nc"]) == (17, 17)
    assert data["k"] == [-2, 2] and data["kstep"] == 0.25
    assert data["c"] == [-4, 4] and data["cstep"] == 0.5
    assert data["token"] == [2, 4, 6, 8] and data["digits"] == 3
    assert np.array(data["y"]).reshape(17, 17, 4).tolist() == slider.values.tolist()
    # Fixed axes: the largest token entry is 2 * 8 + 4 = 20, the largest normalized 1.342.
    assert data["xaxis"] == {"max": 20, "ticks": [-20, -10, 0, 10, 20]}
    assert data["yaxis"] == {"max": 1.5, "ticks": [-1.5, -1, -0.5, 0, 0.5, 1, 1.5]}


def test_the_bars_of_k_1_are_a_readable_share_of_the_axis(slider):
    # At k = 1, c = 0 the smallest entry, 2, is a tenth of the axis end (20): 10 % of the
    # half-panel, 11 px of the 14rem (224 px) panel, where the old +-116 scale gave 2 px.
    data = slider.data()
    assert min(BASE_TOKEN) / data["xaxis"]["max"] >= 0.1


@pytest.mark.parametrize("largest, end, ticks", [
    (20, 20, [-20, -10, 0, 10, 20]), (1.342, 1.5, [-1.5, -1, -0.5, 0, 0.5, 1, 1.5]),
    (116, 150, [-150, -100, -50, 0, 50, 100, 150]), (0.3, 0.3, [-0.3, -0.2, -0.1, 0, 0.1, 0.2, 0.3]),
    (7, 8, [-8, -4, 0, 4, 8]), (0, 1, [-1, -0.5, 0, 0.5, 1]), (1, 1, [-1, -0.5, 0, 0.5, 1]),
])
def test_nice_axis(largest, end, ticks):
    assert nice_axis(largest) == {"max": end, "ticks": ticks}


def test_nice_axis_refuses_what_is_not_a_size():
    for bad in (-1.0, float("nan"), float("inf"), "3"):
        with pytest.raises(ValueError, match="largest must be a finite number"):
            nice_axis(bad)


def test_the_script_and_style_come_from_book_static(slider):
    from lneps.book.slider import STATIC

    html = slider.html()
    js = (STATIC / "lneps-slider.js").read_text().strip()
    css = (STATIC / "lneps-slider.css").read_text().strip()
    assert f"<script>{js}</script>" in html and f"<style>{css}</style>" in html


def test_markup_is_deterministic_offline_and_small(slider):
    html = slider.html()
    assert html == token_slider().html()  # nbval compares the stored text/html
    assert "http://" not in html and "https://" not in html
    assert 'type="range" data-role="k"' in html and 'min="-2"' in html
    assert len(html.encode()) < 200_000
    # MathJax scans output areas: no TeX delimiters may appear in the widget.
    assert "$" not in html and "\\(" not in html
    assert repr(slider) == (
        "TokenSlider(k from -2 to 2 step 0.25, c from -4 to 4 step 0.5, eps=1e-05)")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="start"):
        token_slider(k0=0.1)
    with pytest.raises(ValueError, match="element_id"):
        TokenSlider([0.0, 1.0], [0.0, 1.0], k0=0.0, element_id="a b")
    with pytest.raises(ValueError, match="eps must be >= 0"):
        token_slider(eps=-1.0)


def test_chapter_1_shows_the_slider_and_quotes_its_numbers():
    nb = read(NB)
    shown = [
        o["data"]["text/html"]
        for c in nb.cells if c.cell_type == "code"
        for o in c.outputs if "text/html" in o.get("data", {})
    ]
    assert len(shown) == 1 and shown[0] == token_slider().html()
    g = glued(NB)
    assert g["slider_settings"] == 17 * 17
    assert (g["slider_k_lo"], g["slider_k_hi"], g["slider_k_step"]) == (-2.0, 2.0, 0.25)
    assert (g["slider_c_lo"], g["slider_c_hi"], g["slider_c_step"]) == (-4.0, 4.0, 0.5)
    assert g["slider_flip"] == "[1.342, 0.447, -0.447, -1.342]"
    assert g["slider_zero"] == "[0.000, 0.000, 0.000, 0.000]"
    assert g["slider_k_min_positive"] == 0.25
    # The concept unit: every other setting moves the bars by less than 0.0001.
    ks = grid_axis(-2, 2, 0.25)[grid_axis(-2, 2, 0.25) > 0]
    cs = grid_axis(-4, 4, 0.5)
    change = np.max(np.abs(
        lneps.layer_norm(ks[:, None, None] * np.array(BASE_TOKEN) + cs[None, :, None])
        - lneps.layer_norm(np.array(BASE_TOKEN))
    ))
    assert 1e-5 < change < 1e-4
    assert g["slider_max_change"] == pytest.approx(change, rel=1e-9)


def test_eps_zero_shows_nan_only_for_the_constant_token():
    s = token_slider(k=(-1.0, 1.0, 0.5), c=(0.0, 2.0, 1.0), eps=0.0)
    data = s.data()
    assert data["yaxis"]["max"] == 1.5
    assert np.isnan(s.values[2]).all()  # k = 0: 0/0, Ba et al.'s unstabilized formula
    assert not np.isnan(np.delete(s.values, 2, axis=0)).any()
