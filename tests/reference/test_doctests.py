"""The runnable examples in the reference's docstrings run, and the functions a kernel engineer
calls first have one."""

import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import lneps
import lneps.testing

# Hypothesis is an optional extra; its module is tested when it is installed (it is, here).
MODULES = sorted(m.name for m in pkgutil.walk_packages(lneps.__path__, "lneps.")
                 if not m.name.startswith("lneps.book"))

# The public functions that must carry a runnable example.
EXAMPLES = [lneps.layer_norm, lneps.rms_norm, lneps.group_norm, lneps.batch_norm,
            lneps.testing.compare, lneps.testing.assert_close]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    with np.printoptions(legacy=False):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


@pytest.mark.parametrize("fn", EXAMPLES, ids=lambda f: f.__module__ + "." + f.__name__)
def test_public_functions_carry_an_example(fn):
    assert ">>>" in (fn.__doc__ or ""), fn


def test_examples_are_found():
    total = sum(doctest.DocTestFinder().find(importlib.import_module(n)).__len__() for n in MODULES)
    assert total > 0
    assert "lneps.testing.strategies" in MODULES and "lneps.kernel" in MODULES
