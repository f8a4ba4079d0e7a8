"""lneps.families: one registry of input families, one name each, and every consumer (the testing
tool, the book's surveys, the frameworks' measurement) drawing the same rows from it."""

import re

import ml_dtypes
import numpy as np
import pytest

import lneps.testing as lt
from lneps import families as F
from lneps.book import frameworks as FW
from lneps.book import survey

DTYPES = (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)
NAME = re.compile(r"[a-z0-9][a-z0-9_.+-]*")  # lowercase ASCII, words joined by "_", no spaces


def test_names_are_unique_keys_in_one_scheme():
    assert len(F.FAMILIES) == len(set(F.FAMILIES)) == len(F.names())
    for name, fam in F.FAMILIES.items():
        assert fam.name == name and NAME.fullmatch(name), name
        assert fam.kind in F.KINDS and fam.description and "\n" not in fam.description
    assert set(F.names("distribution")) | set(F.names("format")) | set(F.names("hand")) == set(F.FAMILIES)
    assert set(F.HARD) <= set(F.FAMILIES) and set(F.SURVEYED) <= set(F.FAMILIES)
    assert set(FW.HAND_ROWS) == set(F.names("hand"))


def test_one_entry_per_distribution():
    # the testing tool's "normal" is the survey's N(0, 1), and their "constant" rows are the same family
    keys = [(f.params["mean"], f.params["sd"]) for f in F.FAMILIES.values() if f.kind == "distribution"]
    assert len(keys) == len(set(keys))
    assert F.FAMILIES["normal"].params == {"mean": 0.0, "sd": 1.0}
    assert F.FAMILIES["mean_6e4"].params == {"mean": 6e4, "sd": 8.0}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_every_generator_gives_the_documented_shape_and_dtype(name, dtype):
    fam = F.FAMILIES[name]
    x, gamma, beta = F.draw(name, np.random.default_rng(1), d=10, rows=3, dtype=dtype)
    assert x.shape == (3, 10) and x.dtype == np.dtype(dtype)
    assert np.all(np.isfinite(x.astype(np.float64)))
    for p in (gamma, beta):
        assert p is None or (p.shape == (10,) and p.dtype == np.dtype(dtype))
    assert (gamma is None) == (name not in ("midpoint", "cancelling_beta"))
    if fam.kind == "hand":  # the same row, every row
        assert np.all(x == x[:1]) and np.array_equal(x[0], np.resize(fam.params["values"], 10).astype(dtype))
    if name in ("constant", "zeros", "constant_0.5", "constant_1000", "constant_60000"):
        assert np.all(x == x[:, :1])


@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_draws_are_deterministic(name):
    a = F.draw(name, np.random.default_rng(7), d=8, rows=5, dtype=np.float32)
    b = F.draw(name, 7, d=8, rows=5, dtype=np.float32)  # a seed is the same generator
    c = F.draw(name, np.random.default_rng(8), d=8, rows=5, dtype=np.float32)
    for u, v in zip(a, b):
        assert (u is None and v is None) or np.array_equal(u, v)
    assert np.array_equal(a.x, c.x) == (F.FAMILIES[name].kind == "hand")


def test_bad_names_and_arguments():
    with pytest.raises(ValueError, match=r"name must be one of \[.*'normal'.*'mean_1000'.*'zeros'"):
        F.draw("N(0,1)", 0, d=4)
    for bad in ("mean 1000, sd 1", "hand: zeros", "uniform", None):
        with pytest.raises(ValueError, match="name must be one of"):
            F.get(bad)
    with pytest.raises(ValueError, match="name must be one of"):
        survey.family_rows("N(0,1)", np.random.default_rng(0), 1, 4, np.float16)
    with pytest.raises(ValueError, match="kinds must be"):
        F.names("stress")
    with pytest.raises(ValueError, match="even d"):
        F.draw("midpoint", 0, d=7)
    with pytest.raises(TypeError, match="rng"):
        F.draw("normal", None, d=4)
    with pytest.raises(TypeError, match="format"):
        F.draw("offset", 0, d=4, dtype=np.longdouble if np.dtype(np.longdouble).itemsize > 8 else "int8")
    with pytest.raises(ValueError, match="d"):
        F.draw("normal", 0, d=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_the_testing_tool_draws_the_registry_s_rows(dtype):
    index = {n: k for k, n in enumerate(F.FAMILIES)}
    default = lt.families(dtype, 12, rows=4, seed=3)
    assert list(default) == list(F.HARD)
    every = lt.families(dtype, 12, rows=4, seed=3, kinds="all")
    assert list(every) == list(F.FAMILIES)
    for name, fam in every.items():
        ref = F.draw(name, np.random.default_rng([3, index[name]]), 12, 4, dtype)
        for u, v in zip(fam, ref):
            assert (u is None and v is None) or np.array_equal(u, v), name
        if name in default:
            assert np.array_equal(default[name].x, fam.x)
    assert list(lt.families(dtype, 12, kinds="hand")) == list(F.names("hand"))
    assert list(lt.families(dtype, 12, kinds=("distribution",))) == list(F.names("distribution"))
    assert "midpoint" not in lt.families(dtype, 11, kinds="all")


@pytest.mark.parametrize("dtype", (np.float16, ml_dtypes.bfloat16, np.float32))
def test_the_survey_and_the_frameworks_draw_the_registry_s_rows(dtype):
    for name in F.SURVEYED:
        rows = survey.family_rows(name, np.random.default_rng(5), 6, 16, dtype)
        assert np.array_equal(rows, F.draw(name, np.random.default_rng(5), 16, 6, dtype).x)
    dtname = "bfloat16" if dtype is ml_dtypes.bfloat16 else np.dtype(dtype).name
    rows = FW.measurement_rows(dtname, 100)
    assert list(rows) == list(F.SURVEYED) + list(F.names("hand"))
    for k, name in enumerate(F.SURVEYED):
        ref = F.draw(name, np.random.default_rng([FW.SEED, k, 100]), 100, FW.ELEMENTS // 100, np.float64).x
        assert np.array_equal(rows[name], ref.astype(dtype))
    for name in F.names("hand"):
        assert np.array_equal(rows[name], F.draw(name, 0, 100, 1, dtype).x)
        assert np.array_equal(FW.hand_row(name, 100), F.draw(name, 0, 100).x[0])


def test_the_stored_measurements_use_the_registry_s_names():
    for data in FW.load_all().values():
        assert {r["family"] for r in data["results"]} == set(F.SURVEYED) | set(F.names("hand"))
        assert data["inputs"]["families"] == list(F.SURVEYED)
        assert data["inputs"]["hand_rows"] == FW.HAND_ROWS
        assert {p["row"] for p in data["probes"].values()} <= set(F.names("hand"))
        assert all(v["family"] in F.FAMILIES for v in data["implied_variance"].values())
