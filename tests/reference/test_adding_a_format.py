"""Adding a float format is one entry in ``lneps.formats.FORMATS``: a copy of the package with
ml_dtypes' float8_e5m2 added there (and nothing else changed) computes it, correctly rounded.

What a new format's arithmetic may still need, beyond the entry: a repair in
``lneps.formats.to_format`` if its conversion from float64 rounds twice (bfloat16's does, through
float32; the float8 formats' does not), and an unsigned integer of its width in
``lneps.kernel.rounding`` (8, 16 and 32 bits are there). Everything else reads the registry:
``NARROW`` (2p + 2 <= 53), ``FORMAT_NAMES``, ``lneps.book.exact_ops.FORMATS``, the kernel's bit
fields (``lneps.kernel.float64``), the accepted dtypes of ``lneps.norms`` and ``lneps.testing``."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from lneps import formats

SRC = Path(__file__).resolve().parents[2] / "src" / "lneps"
ENTRY = 'FORMATS = ("float16", "bfloat16", "float32", "float64")'

PROBE = r'''
import json
import ml_dtypes, numpy as np
import lneps, lneps.testing
from lneps import families, formats, naive, oracle

F8 = np.dtype(ml_dtypes.float8_e5m2)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 16)).astype(F8)
g = rng.uniform(0.5, 2, size=16).astype(F8)
b = rng.normal(size=16).astype(F8)

def same(a, c):
    a, c = np.asarray(a, np.float64), np.asarray(c, np.float64)
    return bool(np.array_equal(a, c, equal_nan=True) and (np.signbit(a) == np.signbit(c)).all())

def hard(name):  # the kernel on a hard family, against the exact oracle, bit for bit
    fam = families.draw(name, 1, 16, 32, F8)
    return same(lneps.layer_norm(fam.x, fam.gamma, fam.beta, eps=1e-5),
                oracle.layer_norm_rounded(fam.x, fam.gamma, fam.beta, eps=1e-5))

probes = {
    "formats.format_of": lambda: (formats.format_of("float8_e5m2").p, formats.format_of(F8).emax) == (3, 15),
    "formats.round_to": lambda: same(formats.round_to(np.array([1.125, 1.375, 5e4]), F8), [1.0, 1.5, 49152.0]),
    "formats.ulp": lambda: float(formats.ulp(np.array([1.0]), F8)[0]) == 0.25,
    "formats.NARROW": lambda: F8 in formats.NARROW,
    "naive.layer_norm_naive": lambda: naive.layer_norm_naive(x, eps=1e-5, dtype=F8).dtype == F8,
    "lneps.layer_norm": lambda: same(lneps.layer_norm(x, g, b, eps=1e-5), oracle.layer_norm_rounded(x, g, b, eps=1e-5)),
    "lneps.rms_norm": lambda: same(lneps.rms_norm(x, g, eps=1e-5), oracle.rms_norm_rounded(x, g, eps=1e-5)),
    "lneps.layer_norm on offset rows": lambda: hard("offset"),
    "lneps.layer_norm on midpoints": lambda: hard("midpoint"),
    "lneps.layer_norm on wide_range rows": lambda: hard("wide_range"),
    "lneps.group_norm": lambda: lneps.group_norm(x.reshape(8, 8, 16), 2, eps=1e-5).dtype == F8,
    "lneps.batch_norm": lambda: lneps.batch_norm(x.reshape(8, 8, 16), eps=1e-5).dtype == F8,
    "lneps.layer_norm_backward": lambda: lneps.layer_norm_backward(x, x, eps=1e-5).x.dtype == F8,
    "lneps.testing.assert_close": lambda: lneps.testing.assert_close(
        lneps.layer_norm(x, eps=1e-5), x=x, eps=1e-5).n == x.size,
}
out = {}
for name, probe in probes.items():
    try:
        out[name] = "ok" if probe() else "wrong"
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
'''


def test_a_fifth_format_is_one_entry(tmp_path):
    copy = tmp_path / "lneps"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("book", "__pycache__"))
    source = (copy / "formats.py").read_text(encoding="utf-8")
    assert source.count(ENTRY) == 1
    (copy / "formats.py").write_text(
        source.replace(ENTRY, 'FORMATS = ("float8_e5m2", "float16", "bfloat16", "float32", "float64")'),
        encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result == dict.fromkeys(result, "ok"), result
    assert len(result) == 14


def test_what_reads_the_registry():
    # The places that used to list the formats by hand now derive them from FORMATS.
    from lneps.book import exact_ops

    assert formats.FORMATS == ("float16", "bfloat16", "float32", "float64")
    assert formats.NARROW == formats.DTYPES[:3]
    assert exact_ops.FORMATS == ("float16", "bfloat16", "float32")
    assert formats.FORMAT_NAMES == "float16, bfloat16, float32 or float64"
    assert re.search("float16, bfloat16, float32 or float64", str(_type_error(lambda: formats.format_of("int8"))))
    assert np.dtype(formats.format_of("bfloat16").dtype).name == "bfloat16"


def _type_error(call):
    try:
        call()
    except TypeError as e:
        return e
    raise AssertionError("no TypeError")
