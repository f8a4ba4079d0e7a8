"""lneps.book.plotting: figures drawn at the size they are shown, with their text size recorded."""

import io

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from lneps.book import plotting  # noqa: E402


def test_a_figure_is_stamped_with_its_width_and_smallest_text():
    fig, ax = plotting.subplots(560, 300)
    ax.plot([0, 1], [0, 1], label="a line")
    ax.set_xlabel("x")
    ax.legend()
    png = plotting.png(fig)
    image = Image.open(io.BytesIO(png.data))
    assert image.size == (1120, 600)  # twice the design size: sharp on dense screens
    assert image.info["lneps:css-width"] == "560"
    assert float(image.info["lneps:min-text-px"]) == pytest.approx(plotting.MIN_TEXT_PT * 100 / 72, abs=0.01)
    assert png._repr_png_()[1] == {"width": 560}  # the height follows the width on a phone
    assert (png.css_width, png.css_height) == (560, 300)
    assert repr(png).splitlines()[0] == "<figure 560 x 300 px, smallest text 15.3 px>"


def test_small_text_is_refused():
    fig, ax = plotting.subplots(400, 300)
    ax.set_xlabel("x")
    ax.text(0.5, 0.5, "tiny", fontsize=7)
    with pytest.raises(ValueError, match="text of 7 pt is smaller than 11 pt"):
        plotting.png(fig)


def test_the_smallest_text_is_measured_on_the_drawn_artists():
    fig, ax = plotting.subplots(400, 300)
    ax.set_xlabel("label", fontsize=14)
    ax.set_title("title", fontsize=20)
    # tick labels are at 11 pt, the smallest on the figure
    assert plotting.smallest_text_pt(fig) == 11.0


@pytest.mark.parametrize("width, height, message", [
    (800, 300, "wider than the book's figures"),
    (0, 300, "width must be a positive number"),
    (400, -1, "height must be a positive number"),
    (True, 300, "width must be a positive number"),
])
def test_bad_sizes(width, height, message):
    with pytest.raises(ValueError, match=message):
        plotting.subplots(width, height)


def test_a_figure_without_text_is_refused():
    fig, ax = plotting.subplots(300, 200)
    ax.set_axis_off()
    with pytest.raises(ValueError, match="no text"):
        plotting.png(fig)


def _figure(y, label="x"):
    fig, ax = plotting.subplots(400, 300)
    ax.plot([1.0, 2.0, 3.0], y, label="a line")
    ax.bar([1, 2], [0.5, 0.25])
    ax.set_xlabel(label)
    ax.set_ylabel("value")
    return fig


def test_describe_says_what_the_figure_shows():
    text = plotting.describe(_figure([1.0, 2.0, 4.0]))
    lines = text.splitlines()
    assert lines[0] == "figure 400 x 300 px"
    texts = lines[1].removeprefix("text: ").split(" | ")
    assert lines[1].startswith("text: ") and {"x", "value", "0.5", "3.0"} <= set(texts)
    assert "Line2D 'a line': 6 numbers in 1..4, digest" in text
    assert text.count("Rectangle: 10 numbers") == 2 and "Spine" not in text


def test_describe_ignores_the_last_bits_and_sees_a_visible_change():
    base = plotting.describe(_figure([1.0, 2.0, 4.0]))
    # a change at the 12th digit (another CPU's exp or BLAS) does not change what is shown
    assert plotting.describe(_figure([1.0, 2.0 * (1 + 1e-12), 4.0])) == base
    assert plotting.describe(_figure([1.0, 2.001, 4.0])) != base  # a visible change does
    assert plotting.describe(_figure([1.0, 2.0, 4.0], label="y")) != base  # and so does a label


def test_the_png_text_form_is_the_description():
    fig = _figure([1.0, 2.0, 4.0])
    png = plotting.png(fig)
    assert repr(png).splitlines()[1:] == png.description.splitlines()
    assert png.description == plotting.describe(fig)
