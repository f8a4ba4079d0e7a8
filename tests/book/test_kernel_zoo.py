"""The kernel zoo's registry (lneps.book.kernel_zoo): enough correct kernels and defects for the
chapter, each named once and described, layer norm and RMS norm. Their grades are tested in
tests/book/test_zoo_grades.py."""

import numpy as np

from lneps.book import kernel_zoo as kz


def test_the_zoo_has_what_the_chapter_needs():
    correct, defective = kz.kernels("correct"), kz.kernels("defective")
    assert len(correct) >= 11 and len(defective) >= 6
    assert len({k.name for k in kz.ZOO}) == len(kz.ZOO)
    assert all(k.description and k.op in ("layer_norm", "rms_norm") for k in kz.ZOO)
    assert {k.op for k in correct} == {"layer_norm", "rms_norm"}


def test_one_zoo_holds_the_chapter_s_kernels():
    # the chapter's correct kernel and six one-change defects are zoo kernels (one zoo, graded
    # by one metric), each found by name; an unknown name is a KeyError that lists the names
    chapter = [kz.by_name(n) for n in kz.CHAPTER]
    assert [k.kind for k in chapter] == ["correct"] + ["defective"] * 6
    assert all(k.op == "layer_norm" for k in chapter)
    try:
        kz.by_name("unbiased")
    except KeyError as e:
        assert "unbiased (d - 1) variance" in str(e)
    else:
        raise AssertionError("an unknown name must fail")


def test_the_input_format_defects_are_the_correct_kernel_in_float32():
    # computed in x's own format: in float32 they change nothing, so they show only in 16 bits
    x = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
    right = kz.by_name("two-pass, pairwise sums").fn(x, None, None, 1e-5)
    for name in ("all in the input format", "eps after rounding", "affine in the input format"):
        assert np.array_equal(kz.by_name(name).fn(x, None, None, 1e-5), right), name
    x16 = x.astype(np.float16)
    assert not np.array_equal(
        kz.by_name("all in the input format").fn(x16, None, None, 1e-5),
        kz.by_name("two-pass, pairwise sums").fn(x16, None, None, 1e-5),
    )


def test_the_designs_name_their_own_classes():
    import lneps.testing as lt

    designs = kz.kernels("design")
    assert {k.op for k in designs} == {"layer_norm", "rms_norm"}
    assert all(k.classes and set(k.classes) <= set(lt.DESIGN_CLASSES) for k in designs)
    assert all(k.classes is None for k in kz.ZOO if k.kind != "design")
