r"""all-MiniLM-L6-v2 in NumPy: a trained 6-layer BERT encoder whose 13 LayerNorms use ε = 1e-12.

:mod:`lneps.book.minilm.files` finds the model's installed files, checks them, reads the
weights and tokenizes sentences; :mod:`lneps.book.minilm.encoder` runs the forward pass in a
defined arithmetic. Their public names are re-exported here.
:mod:`lneps.book.minilm.torch_model` builds the same model as a PyTorch module (the frameworks
extra), for :func:`lneps.torch.probe`; it is not imported here, so this package needs no torch.
"""

from .files import (MODEL_REQUIREMENT, MiniLM, ModelNotInstalled, encode, file_sha256, load, model_directory,
                    model_sha256)
from .encoder import Forward, forward

__all__ = [
    "MODEL_REQUIREMENT",
    "ModelNotInstalled",
    "MiniLM",
    "Forward",
    "model_directory",
    "load",
    "file_sha256",
    "model_sha256",
    "encode",
    "forward",
]
