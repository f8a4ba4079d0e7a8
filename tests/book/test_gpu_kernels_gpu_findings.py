"""lneps.book.gpu_kernels.gpu_findings, where the gpu extra is installed: the searches for the
findings' smallest inputs give the stored answers, and what they return is what the chapter
says (the failing input fails, the fix and torch's kernel pass). Skips without the extra."""

from gpu_extra import require_extra

require_extra()

import pytest  # noqa: E402
import torch  # noqa: E402

from lneps.book.gpu_kernels import gpu_findings, gpu_results  # noqa: E402

STORED = gpu_results.load()["findings"]


@pytest.fixture(autouse=True)
def stored_threads():
    """torch's CPU backward sums dγ over rows in per-thread blocks, so its bits depend on the
    thread count: re-run with the count the stored grades record (another test of the same
    process may have set another)."""
    before = torch.get_num_threads()
    torch.set_num_threads(gpu_results.load()["provenance"]["torch_threads"])
    yield
    torch.set_num_threads(before)


def test_llama_search_gives_the_stored_row():
    found = gpu_findings.llama_smallest()
    assert found == STORED["llama"]
    assert found["llama"]["max_scaled"] > found["bound_at_worst"]
    assert found["liger_rms_norm_gemma"]["passed"] and found["torch_rms_norm"]["passed"]


def test_none_threshold_gives_the_stored_value():
    found = gpu_findings.none_threshold(64)
    assert found == next(f for f in STORED["none"] if f["d"] == 64)
    assert found["c"] == 32.0 and found["output"] == 0.0     # 64 x 32^2 = 65536 overflows


def test_partials_search_gives_the_stored_batch():
    found = gpu_findings.partials_smallest()
    assert found == STORED["partials"]
    assert found["float32_partials"]["passed"]
