"""lneps.book.printing: the formats the chapters print numbers in."""

import math

import pytest

from lneps.book.printing import decimal_place, fmt_vec, sci


@pytest.mark.parametrize("x, digits, text", [
    (1.3282223665367354e-06, 1, "1.3 × 10⁻⁶"),
    (1e-5, 0, "10⁻⁵"),
    (9007199253.740992, 1, "9.0 × 10⁹"),
    (1e16, 0, "10¹⁶"),
    (-2.5e-3, 1, "−2.5 × 10⁻³"),
    (1.1920928955078125e-07, 2, "1.19 × 10⁻⁷"),
    (3.3e-16, 1, "3.3 × 10⁻¹⁶"),
    (999.96, 1, "1.0 × 10³"),     # rounding carries into the exponent
    (0.0, 1, "0"), (math.inf, 1, "inf"),
])
def test_sci(x, digits, text):
    assert sci(x, digits) == text


def test_sci_agrees_with_python_e_format():
    for x in (1.234e-7, 5.5e12, 7e-300, 2.0**-53):
        mantissa, exponent = f"{x:.2e}".split("e")
        text = sci(x, 2)
        assert text.startswith(mantissa) and text.endswith(
            str(int(exponent)).translate(str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")))


def test_fmt_vec_and_decimal_place():
    assert fmt_vec([-1.3416, -0.0001, 0.4472]) == "[-1.342, 0.000, 0.447]"
    assert decimal_place(1.3e-6) == 6
    with pytest.raises(ValueError, match="delta must be in"):
        decimal_place(0.0)
