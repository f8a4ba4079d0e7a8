"""The kernel zoo's registry (lneps.book.kernel_zoo): enough correct kernels and defects for the
chapter, each named once and described, layer norm and RMS norm. Their grades are tested in
tests/book/test_zoo_grades.py."""

from lneps.book import kernel_zoo as kz


def test_the_zoo_has_what_the_chapter_needs():
    correct, defective = kz.kernels("correct"), kz.kernels("defective")
    assert len(correct) >= 11 and len(defective) >= 6
    assert len({k.name for k in kz.ZOO}) == len(kz.ZOO)
    assert all(k.description and k.op in ("layer_norm", "rms_norm") for k in kz.ZOO)
    assert {k.op for k in correct} == {"layer_norm", "rms_norm"}
