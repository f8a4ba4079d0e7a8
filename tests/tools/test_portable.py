"""tools/portable.py: the profiles make portable runs, and its refusal to call a run a profile
whose settings did not take effect."""

import os
import sys

import pytest

from notebooks import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import portable  # noqa: E402


def test_three_profiles_as_the_readme_states():
    assert list(portable.PROFILES) == ["native", "avx2", "x86-64-v2"]
    avx2, _ = portable.PROFILES["avx2"]
    v2, _ = portable.PROFILES["x86-64-v2"]
    assert avx2["OPENBLAS_CORETYPE"] == "Haswell" and avx2["OPENBLAS_NUM_THREADS"] == "1"
    assert "X86_V4" in avx2["NPY_DISABLE_CPU_FEATURES"].split()
    assert "X86_V3" not in avx2["NPY_DISABLE_CPU_FEATURES"].split()
    assert {"X86_V3", "X86_V4"} <= set(v2["NPY_DISABLE_CPU_FEATURES"].split())
    assert v2["OPENBLAS_CORETYPE"] == "Prescott"
    readme = (ROOT / "README.md").read_text()
    for env in (avx2, v2):
        for value in env.values():
            assert value in readme


def test_a_profile_that_did_not_take_effect_is_refused():
    _, want = portable.PROFILES["avx2"]
    ok = {"enabled": ["X86_V2", "X86_V3"], "openblas": "Haswell", "threads": 1}
    portable.check_profile("avx2", ok, want)
    with pytest.raises(SystemExit, match="numpy still uses"):
        portable.check_profile("avx2", {**ok, "enabled": ["X86_V3", "X86_V4"]}, want)
    with pytest.raises(SystemExit, match="OpenBLAS runs SkylakeX"):
        portable.check_profile("avx2", {**ok, "openblas": "SkylakeX"}, want)
    with pytest.raises(SystemExit, match="2 threads"):
        portable.check_profile("avx2", {**ok, "threads": 2}, want)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the profiles are x86-64 ones")
def test_the_probe_sees_the_forced_settings():
    env, want = portable.PROFILES["x86-64-v2"]
    seen = portable.probe({**os.environ, **env})
    portable.check_profile("x86-64-v2", seen, want)
    assert "X86_V3" not in seen["enabled"]
