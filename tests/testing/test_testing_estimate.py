"""assert_close grades large outputs against the kernel's float64 estimate rather than the
correctly rounded float64 value (lneps.testing._private.exact_errors._estimated), and computes the derived
bound only on the rows a floor cannot clear (lneps.testing._private.deferred_bound.bound_floor). Both are
shortcuts: these tests hold them to deciding exactly what the exact path decides.

* the kernel's estimate lies within its stated distance of the exact value (judged by the
  oracle's rational arithmetic, and by the double-double float64 path on wide rows);
* the floor lies under the bound, element by element, on every family;
* assert_close with the shortcuts and without them (every block measured exactly, the bound on
  every row) agree: pass or fail, how many elements exceed, the message, the Report.
"""

import ml_dtypes
import numpy as np
import pytest

import lneps
import lneps.norms as norms
import lneps.oracle as oracle
import lneps.testing as lt
import lneps.testing._private.assertions as A
import lneps.testing._private.deferred_bound as D
from lneps.book import kernel_zoo as kz
from lneps.testing._private.deferred_bound import bound_floor
from lneps.testing._private.forward_error import forward_bound
from lneps.testing._private.kernel_classes import KERNEL_CLASSES

BF16 = np.dtype(ml_dtypes.bfloat16)
FORMATS = (np.float16, BF16, np.float32)
U = 2.0**-53


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_the_estimate_is_within_its_bound_of_the_exact_value(dtype, kind):
    """Judged by the oracle (rational arithmetic, rounded once to float64: within u/2 of exact)."""
    for d in (9, 64):
        for name, (x, g, b) in lt.families(dtype, d, rows=4).items():
            b = b if kind == "layer" else None
            y, est, mean, rstd, E = norms.normalize_with_estimate(kind, x, g, b, eps=1e-5)
            if kind == "layer":
                exact = oracle.layer_norm_exact(x, g, b, eps=1e-5, dtype=np.float64)
            else:
                exact = oracle.rms_norm_exact(x, g, eps=1e-5, dtype=np.float64)
            before_beta = np.abs(exact - (0.0 if b is None else b.astype(np.float64)))
            allowed = E * before_beta * (1 + 2**-40) + U * np.abs(est) + U * np.abs(exact)
            ok = np.isfinite(
                est
            )  # NaN: settled exactly by the kernel, y is right, no bound claimed
            assert ok.mean() > 0.9, name
            assert np.all(np.abs(est - exact)[ok] <= allowed[ok]), (d, name)
            assert np.array_equal(
                y.astype(np.float64),
                oracle.layer_norm_exact(x, g, b, eps=1e-5)
                if kind == "layer"
                else oracle.rms_norm_exact(x, g, eps=1e-5),
                equal_nan=True,
            )


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
def test_the_estimate_on_wide_rows(dtype):
    for name, (x, g, b) in lt.families(dtype, 4096, rows=4).items():
        y, est, mean, rstd, E = norms.normalize_with_estimate("layer", x, g, b, eps=1e-5)
        exact = lneps.layer_norm(x.astype(np.float64), g, b, eps=1e-5)  # correctly rounded float64
        ok = np.isfinite(est)
        bb = 0.0 if b is None else b.astype(np.float64)
        allowed = E * np.abs(exact - bb) * (1 + 2**-40) + U * np.abs(est) + U * np.abs(exact)
        assert np.all(np.abs(est - exact)[ok] <= allowed[ok]), name
        assert np.array_equal(y, lneps.layer_norm(x, g, b, eps=1e-5), equal_nan=True)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", FORMATS, ids=str)
def test_the_floor_lies_under_the_bound(op, dtype):
    rng = np.random.default_rng(5)
    for d in (8, 100, 1024):
        for name, (x, g, b) in lt.families(dtype, d, rows=8).items():
            b = b if op == "layer_norm" else None
            for gain in (g, None, rng.normal(size=d).astype(dtype)):
                if op == "layer_norm":
                    y, mean, rstd = lneps.layer_norm(
                        x.astype(np.float64), gain, b, eps=1e-5, return_stats=True
                    )
                    stats = (mean, rstd)
                else:
                    y, rstd = lneps.rms_norm(
                        x.astype(np.float64), gain, eps=1e-5, return_stats=True
                    )
                    stats = (rstd,)
                for kernels in (KERNEL_CLASSES, ("two_pass",), ("welford",)):
                    kw = dict(
                        x=x, gamma=gain, beta=b, eps=1e-5, exact=y, stats=stats, kernels=kernels
                    )
                    bound = forward_bound(op, **kw)
                    floor = bound_floor(op, **kw)
                    scale = 1.0 if gain is None else np.abs(gain.astype(np.float64))
                    den = lneps.formats.ulp(np.fmax(np.abs(y), scale), dtype)
                    with np.errstate(invalid="ignore"):
                        assert np.all(scale * floor / den <= bound), (d, name, kernels)


def _exact_everywhere(monkeypatch):
    """assert_close without its shortcuts: every block measured exactly, the bound on every row."""
    measure = A.measure

    def exactly(call, rows=slice(None), exact=True):
        return measure(call, rows, exact=True)

    for module in (
        A,
        D,
    ):  # both measure blocks: assert_close, and the deferred grading near the bound
        monkeypatch.setattr(module, "measure", exactly)
    # patched where assert_close looks it up (it lives in deferred_bound, which never calls it)
    monkeypatch.setattr(A, "floor_applies", lambda gr, metric: False)


def _outcome(y, **kw):
    try:
        return "pass", lt.assert_close(y, **kw)
    except AssertionError as err:
        return "fail", str(err)


KERNELS = [
    kz.two_pass_sequential,
    kz.welford_chan_pytorch,
    kz.rsqrt_low_2ulp,
    kz.affine_fma,
    kz.eps_ignored,
    kz.unbiased_variance,
    kz.accumulate_16bit,
    kz.eps_after_sqrt,
]


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
def test_the_shortcuts_decide_as_the_exact_path_does(dtype, monkeypatch):
    cases = []
    for d in (8, 64, 768):
        for name, (x, g, b) in lt.families(dtype, d, rows=16).items():
            if d == 768 and name not in ("normal", "offset", "cancelling_beta"):
                continue  # the wide rows' exact path is slow in float32: three families there
            for eps in (1e-5, 1e-12):
                for fn in KERNELS:
                    with np.errstate(all="ignore"):
                        y = fn(x, g, b, eps)
                    cases.append((y, dict(x=x, gamma=g, beta=b, eps=eps)))
            with np.errstate(all="ignore"):
                naive = lneps.layer_norm(x, g, b, eps=1e-5, compute_dtype=dtype)
            cases.append((naive, dict(x=x, gamma=g, beta=b, eps=1e-5)))
            cases.append((naive, dict(x=x, gamma=g, beta=b, eps=1e-5, max_ulp=1.0)))
    fast = [_outcome(y, **kw) for y, kw in cases]
    _exact_everywhere(monkeypatch)
    exact = [_outcome(y, **kw) for y, kw in cases]
    assert sum(f[0] == "fail" for f in fast) > 10 and sum(f[0] == "pass" for f in fast) > 10
    for (y, kw), f, e in zip(cases, fast, exact):
        assert f[0] == e[0]
        if f[0] == "fail":
            assert f[1] == e[1]
        else:
            assert f[1] == e[1] and np.array_equal(
                f[1].scaled_error, e[1].scaled_error, equal_nan=True
            )


def test_a_defect_on_a_few_rows_of_a_large_output_is_found_exactly(monkeypatch):
    """Blocks of many rows: the floor clears most rows, the bound is computed on the rest."""
    x = lt.families(np.float16, 1024, rows=600)["normal"].x
    y = lneps.layer_norm(x, eps=1e-5)
    y[[3, 290, 599], [5, 700, 1023]] = np.nextafter(
        y[[3, 290, 599], [5, 700, 1023]], np.float16(10)
    )
    y[77, 12] = np.float16(np.nan)
    fast = _outcome(y, x=x, eps=1e-5)
    _exact_everywhere(monkeypatch)
    assert fast == _outcome(y, x=x, eps=1e-5)
    # the NaN, and the three elements a float16 ulp off (beyond the bound of a 16-bit output)
    assert fast[0] == "fail" and fast[1].startswith("4 of 614400 elements exceed")
