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


def test_a_profile_that_repeats_native_is_skipped(monkeypatch, capsys):
    """On a CPU without AVX-512, avx2 would rerun the native kernels: only x86-64-v2 runs, on
    every core; where AVX-512 is native, both run, side by side."""
    started = []

    def fake_run(label, env, workers):
        started.append((env["LNEPS_PORTABLE_PROFILE"], workers))
        return label, 0, "1 passed", 0.0, ""

    monkeypatch.setattr(portable, "_run", fake_run)
    monkeypatch.setattr(portable.os, "cpu_count", lambda: 2)
    for native, want in ((["X86_V2", "X86_V3"], [("x86-64-v2", 2)]),
                         (["X86_V2", "X86_V3", "X86_V4"], [("avx2", 1), ("x86-64-v2", 1)])):
        def probe(env, native=native):
            forced = env.get("NPY_DISABLE_CPU_FEATURES", "").split()
            return {"enabled": [f for f in native if f not in forced], "openblas": env.get("OPENBLAS_CORETYPE", "Zen"),
                    "threads": int(env.get("OPENBLAS_NUM_THREADS", 2))}

        monkeypatch.setattr(portable, "probe", probe)
        started.clear()
        assert portable.main(["avx2", "x86-64-v2"]) == 0
        assert sorted(started) == want
    assert "avx2: skipped, this CPU has no X86_V4" in capsys.readouterr().out
