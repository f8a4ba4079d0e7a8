"""The book's studies: what the chapters compute with the reference, and how they show it.

Not part of the reference a kernel test imports: these modules need the ``book`` extra
(``pip install "lneps[book]"``: SymPy, Matplotlib, mpmath, safetensors, tokenizers,
threadpoolctl). Each is loaded on first use (``lneps.book.survey``):

* derivations in SymPy: ``symbolic``, ``symbolic_backward``;
* the response family and its figure: ``response``;
* finite precision: ``finite_precision`` (with ``survey``, the families of hard rows and their
  error surveys), ``printing`` (how numbers are printed);
* the frameworks' defaults and measurements: ``defaults``, ``eps_swap``, ``eps_tables``,
  ``frameworks``, ``incidents``, reading the tables of facts in ``data/``;
* the trained network: ``minilm`` and ``activations``, in the defined arithmetic of
  ``exact_ops`` (each operation's exact result, rounded once);
* testing a kernel: ``defective`` and ``kernel_zoo`` (correct and defective kernels), graded
  by ``zoo_grades``;
* the figures and the slider: ``plotting``, ``slider``.
"""

import importlib

_MODULES = ("symbolic", "symbolic_backward", "response", "finite_precision", "survey", "printing",
            "defaults", "eps_swap", "eps_tables", "frameworks", "incidents", "minilm", "activations",
            "exact_ops", "kernel_zoo", "zoo_grades", "plotting", "slider", "training")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lneps.book' has no attribute {name!r}")
