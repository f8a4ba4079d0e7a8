"""lneps: the layer-normalization epsilon, computed.

The package behind the book: short, pure NumPy functions, each one formula, that the notebooks
import and the tests check against closed forms and the seeds' numbers.
"""

from .norms import batch_norm, layer_norm, rms_norm

__all__ = ["layer_norm", "rms_norm", "batch_norm"]
