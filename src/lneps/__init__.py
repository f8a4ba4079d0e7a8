"""lneps: the layer-normalization epsilon, computed.

The package behind the book: short, pure NumPy functions, each one formula, that the notebooks
import and the tests check against closed forms, an exact oracle and the sources' numbers.

``layer_norm``, ``rms_norm``, ``group_norm`` and ``batch_norm`` (correctly rounded by default:
:mod:`lneps.norms`), their backward passes, the Jacobian and the softmax are importable
from ``lneps`` directly. Everything else is a submodule, loaded on first use so that
``import lneps`` stays light: grading a kernel against them (``testing``), the SymPy
derivations (``symbolic``, ``symbolic_backward``), the kernel and its exact oracle (``kernel``
with ``kernel_dd``, ``kernel_triple``, ``kernel_exact``, ``kernel_settle``; ``dd``,
``rounding``, ``oracle``), finite precision
(``precision``, with ``formats``, ``rounded``, ``ulp``, ``survey``), the response family
(``response``), defaults and epsilon swaps (``defaults``, ``eps_swap``), the frameworks'
measurements and incidents (``frameworks``, ``incidents``), the trained network (``minilm``,
``activations``, in the defined arithmetic of ``correctly_rounded``), and the book's figures, tables and slider (``figures``, ``report``,
``slider``).

``import lneps`` and ``import lneps.testing`` need only NumPy and ml_dtypes (``pip install
lneps``); the book's modules also need SymPy, Matplotlib, mpmath, safetensors, tokenizers and
threadpoolctl (``pip install "lneps[book]"``). ``__version__`` is the package's version, read
from here by ``pyproject.toml``.
"""

import importlib

__version__ = "0.1.0"

from .backward import layer_norm_backward, layer_norm_eps_derivative, rms_norm_backward
from .jacobian import *  # noqa: F403
from .jacobian import __all__ as _jacobian_all
from .norms import batch_norm, group_norm, layer_norm, rms_norm, rms_norm_default_eps
from .softmax import *  # noqa: F403
from .softmax import __all__ as _softmax_all

_SUBMODULES = ("symbolic", "response", "defaults", "precision", "formats", "rounded", "ulp",
               "survey", "oracle", "kernel", "dd", "rounding", "report", "slider", "frameworks",
               "incidents", "eps_swap", "figures",
               "symbolic_backward", "minilm", "activations", "testing", "correctly_rounded")

__all__ = ["layer_norm", "rms_norm", "group_norm", "batch_norm", "rms_norm_default_eps", *_jacobian_all,
           *_softmax_all, "layer_norm_backward", "rms_norm_backward", "layer_norm_eps_derivative"]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lneps' has no attribute {name!r}")
