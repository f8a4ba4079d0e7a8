"""Loaded for every test, the notebooks' cells included (tests/conftest.py is not, for book/):
how nbval compares a figure, and which tests share a process."""

import functools
import os
import re
from pathlib import Path

import nbval.plugin
import pytest

ROOT = Path(__file__).resolve().parent

# A glued figure is stored twice: as PNG bytes (application/papermill.record/image/png), which
# differ between CPUs (anti-aliasing arithmetic, x86 against arm64), and as text, which
# lneps.book.plotting.describe fills with what the figure shows: its texts and the numbers it plots.
# nbval already skips a plain image/png; it skips the glued PNG too and compares the text.
_nbval_init = nbval.plugin.IPyNbFile.__init__


def _compare_figures_by_what_they_show(self, *args, **kwargs):
    _nbval_init(self, *args, **kwargs)
    self.skip_compare = self.skip_compare + ("application/papermill.record/image/png",)


nbval.plugin.IPyNbFile.__init__ = _compare_figures_by_what_they_show


@functools.cache
def _mentions(path: str, pattern: str) -> bool:
    return path.endswith(".py") and re.search(pattern, (ROOT / path).read_text()) is not None


def _uses_build(path: str) -> bool:
    """A test file that needs `make book` (built_book, or html_dir, which asks for it)."""
    return _mentions(path, r"\b(built_book|html_dir)\b")


def _reads_network(path: str) -> bool:
    """A test file that reads the trained network's activations, which its notebook caches."""
    return _mentions(path, r"from network_data import .*\bmeasurements\b")


@functools.cache
def _grades_the_zoo(path: str) -> bool:
    """A notebook that grades the kernel zoo (lneps.book.zoo_grades.grade, kept in the cache)."""
    return path.endswith(".ipynb") and "zoo_grades.grade(" in (ROOT / path).read_text()


def _group(path: str) -> str:
    """What must run in one process, in collection order: a test file, or a notebook's cells
    (one kernel). One group for the network: its notebook fills its cache, the test files that
    read it follow (computing it again costs 40 s). One for the build: the test files of the
    rendered book share one `make book` (two at once would write one _build). No test file
    does both (tests/tools/test_conftest.py holds that), so two workers take them side by
    side. One for the notebooks that grade the kernel zoo: the first keeps the grades in the
    cache (lneps.book.result_cache), the others read them (grading again costs 15 s)."""
    if path == "book/trained_network.ipynb" or _reads_network(path):
        return "the trained network"
    if _uses_build(path):
        return "the rendered book"
    if _grades_the_zoo(path):
        return "the kernel zoo"
    return path


def pytest_xdist_make_scheduler(config, log):
    """make test runs one worker per core (pytest-xdist): each group goes to one worker, the
    largest first. (xdist's own --dist loadgroup does not work with pytest 9's node ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid.split("::")[0])

    return ByGroup(config, log)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection
def pytest_collection_modifyitems(session, config, items):
    def path(item):
        return item.nodeid.split("::")[0]

    build = [item for item in items if not {"built_book", "html_dir"}.isdisjoint(getattr(item, "fixturenames", ()))]
    if os.environ.get("LNEPS_PORTABLE_PROFILE"):
        # `make portable` reruns what computes numbers under other arithmetic (tools/portable.py);
        # the tests of the rendered book (its build, pages, PDF) are not about arithmetic.
        config.hook.pytest_deselected(items=build)
        items[:] = [item for item in items if item not in build]
        build = []
    # The network's activations are computed once, by its notebook (collected after tests/),
    # into the cache LNEPS_CACHE_DIR: the tests that read them run after that notebook.
    network = [item for item in items if item not in build and _reads_network(path(item))]
    items[:] = [item for item in items if item not in build and item not in network] + network + build


# The slow correctness grids: `make test` leaves them out (-m "not full"), `make test-full` (CI)
# runs them. Each entry is a test's node id up to its name (every parameter of it), or with a
# parameter id (that case alone); a lighter case of the same property stays in `make test`.
FULL = (
    # the kernel on every hard family at every d: float32 stays, the 16-bit formats are the grid
    "tests/kernel/test_kernel.py::test_every_family_and_d_is_correctly_rounded[float16]",
    "tests/kernel/test_kernel.py::test_every_family_and_d_is_correctly_rounded[bfloat16]",
    "tests/kernel/test_kernel.py::test_rows_longer_than_a_block_are_correctly_rounded[float64]",
    "tests/kernel/test_kernel.py::test_a_beta_that_cancels_gamma_u[float16]",
    "tests/kernel/test_kernel.py::test_a_beta_that_cancels_gamma_u[bfloat16]",
    # the backward pass on long rows: float32 stays
    "tests/kernel/test_gradients.py::test_long_rows[float16]",
    "tests/kernel/test_gradients.py::test_long_rows[bfloat16]",
    "tests/kernel/test_gradients.py::test_long_rows[float64]",
    # the 16- and 32-bit formats at the edges of their range (float64's edges, the overflow near
    # 5e307 among them, stay)
    "tests/kernel/test_kernel_extremes.py::test_16_and_32_bit_rows_at_the_edges_of_their_range",
    # the testing tool's exact and estimated paths agreeing on every family: float16 stays
    "tests/testing/test_testing_estimate.py::test_the_shortcuts_decide_as_the_exact_path_does[bfloat16]",
    "tests/testing/test_testing_estimate.py::test_the_shortcuts_decide_as_the_exact_path_does[<class 'numpy.float32'>]",
    # the probabilistic bound at d = 4096 on another input (seed 11): the appendix "How the
    # tolerance is derived" asserts the same on ten inputs per format and family under nbval
    "tests/book/test_zoo_grades.py::test_the_probabilistic_bound_at_d_4096_on_64_rows",
    # the zoo's correct kernels at d = 768 and beyond (d = 8 to 100 stay, and the notebooks grade
    # the whole zoo at d = 64, 768 and 4096)
    *(f"tests/book/test_zoo_grades.py::test_every_correct_kernel_passes[{d}-{eps}-{rows}-{dt}]"
      for d, rows in ((768, 16), (1024, 16), (4096, 8), (8192, 8)) for eps in ("1e-05", "1e-12")
      for dt in ("<class 'numpy.float16'>", "bfloat16", "<class 'numpy.float32'>")),
    # correct backward kernels at d = 4096 (d = 64 and 768 stay)
    *(f"tests/testing/test_backward_error.py::test_correct_kernels_stay_within_the_bound[{op}-4096-{dt}]"
      for op in ("layer_norm", "rms_norm") for dt in ("float32", "float16", "bfloat16")),
    # the float16 forward's every site holds float16 values (the notebook runs that forward)
    "tests/book/test_minilm.py::test_half_precision_sites_hold_values_of_the_format",
    # the two-pass Triton kernel's dgamma partials in the interpreter (the stored grades stay)
    "tests/book/test_gpu_kernels_triton_two_pass.py::test_dgamma_needs_float32_partials",
    # the probabilistic bound on every hard family: float16 stays
    *(f"tests/testing/test_testing_api.py::test_probabilistic_passes_correct_kernels_on_every_hard_family[{dt}]"
      for dt in ("bfloat16", "<class 'numpy.float32'>")),
    # the network's forward pass on one BLAS thread and on two, bit for bit (the defined
    # arithmetic's products do not depend on the order; the notebook runs on one)
    "tests/book/test_activations.py::test_the_forward_pass_does_not_depend_on_the_blas_thread_count",
    # a correct two-pass kernel within the bound at large d in float32: d = 8 and 64 stay
    *(f"tests/testing/test_two_pass.py::test_a_correct_two_pass_kernel_stays_within_the_bound[{case}]"
      for case in ("4096-2-<class 'numpy.float32'>", "768-8-<class 'numpy.float32'>")),
)
# Whole files: printing the book to PDF (`make pdf`, about 50 s of one worker; the pages' links,
# the PDF button's absence without it included, stay in make test).
FULL_FILES = ("tests/rendered/test_pdf.py",)


def _is_full(nodeid: str) -> bool:
    return (any(nodeid == f or nodeid.startswith(f + "[") for f in FULL)
            or nodeid.split("::")[0] in FULL_FILES)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_itemcollected(item):
    if _is_full(item.nodeid):
        item.add_marker(pytest.mark.full)
