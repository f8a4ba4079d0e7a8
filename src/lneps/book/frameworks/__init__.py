"""What the frameworks compute: PyTorch, Flax, ONNX Runtime and ONNX's reference evaluator,
measured against lneps and stored in ``src/lneps/book/data/frameworks/``.

Nothing here imports a framework (``tools/measure_frameworks.py`` runs them). Modules:

* ``measured``: the grid and the rows the frameworks run on, and how an output is scored
  (:func:`error_summary`, :func:`output_digest`);
* ``torch_backward``: PyTorch's CPU backward pass, stored with its inputs (imported by name, not
  re-exported: :func:`torch_backward.load`);
* ``data_files``: the stored files, their schema, writing, reading and comparing them
  (:func:`dump`, :func:`load`, :func:`compare`);
* ``findings``: what the book reads out of them (:func:`aggregate`, :func:`summary_rows`,
  :func:`eps_verdict`).
"""

# Each module's public names, re-exported: the package's face is the union of the three.
from . import data_files, findings, measured
from .findings import *  # noqa: F403
from .measured import *  # noqa: F403
from .data_files import *  # noqa: F403

__all__ = [*measured.__all__, *data_files.__all__, *findings.__all__]
