"""lneps: the layer-normalization epsilon, computed.

The package has three parts, each a folder:

* **the reference** (this folder): ``layer_norm``, ``rms_norm``, ``group_norm`` and
  ``batch_norm``, correctly rounded by default (:mod:`lneps.norms`); their backward passes
  (:mod:`lneps.backward`), the Jacobian (:mod:`lneps.jacobian`) and the softmax, all importable
  from ``lneps`` directly; grading a kernel against them (:mod:`lneps.testing`, with
  :func:`lneps.formats.ulp`, on the input families of :mod:`lneps.families`); the naive
  arithmetic rounded to a format (:mod:`lneps.naive`, with :mod:`lneps.formats`);
* **the kernel** that computes the correctly rounded results (:mod:`lneps.kernel`: a float64
  tier, double-double and triple precision, exact ties; error-free transforms in
  :mod:`lneps.kernel.expansions`, rounding from first principles in :mod:`lneps.kernel.rounding`; what the
  book needs of them is exported as :mod:`lneps.error_free` and :func:`lneps.formats.round_to`),
  and **the exact oracle** that checks it in rational arithmetic (:mod:`lneps.oracle`);
* **the book's studies** (:mod:`lneps.book`): the SymPy derivations, surveys, the frameworks'
  measurements, the trained network, the figures and the slider.

``import lneps`` and ``import lneps.testing`` need only NumPy and ml_dtypes (``pip install
lneps``) and never load the book; :mod:`lneps.book` also needs SymPy,
Matplotlib, mpmath, safetensors, tokenizers and threadpoolctl (``pip install "lneps[book]"``).
Submodules are loaded on first use (``lneps.testing``, ``lneps.book.survey``).
``__version__`` is the package's version, read from here by ``pyproject.toml``.
"""

import importlib

__version__ = "0.1.0"

from .backward import layer_norm_backward, layer_norm_eps_derivative, rms_norm_backward
from .jacobian import *  # noqa: F403
from .norms import batch_norm, group_norm, layer_norm, rms_norm, rms_norm_default_eps
from .softmax import *  # noqa: F403

_SUBMODULES = ("testing", "families", "norms", "backward", "jacobian", "softmax", "naive", "formats", "kernel",
               "oracle", "book")

# (The modules' __all__ read through importlib: their star imports above bind the names
# `jacobian` and `softmax` to functions.)
__all__ = ["layer_norm", "rms_norm", "group_norm", "batch_norm", "rms_norm_default_eps",
           *importlib.import_module(".jacobian", __name__).__all__,
           *importlib.import_module(".softmax", __name__).__all__,
           "layer_norm_backward", "rms_norm_backward", "layer_norm_eps_derivative"]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lneps' has no attribute {name!r}")
