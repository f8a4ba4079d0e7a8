"""Finite precision in one namespace: the chapters' ``from lneps.book import finite_precision as P``.

The work is done in one module per idea, re-exported here:

* :mod:`lneps.formats`: the formats, the ulp and errors measured in it, and which epsilon
  survives them;
* :mod:`lneps.naive`: arithmetic with every operation rounded to a format;
* :mod:`lneps.book.survey`: the stress families surveyed (``SURVEYED``, names of
  :mod:`lneps.families`, the one registry of input families) and worst-error surveys;
* :mod:`lneps.oracle`: the exact reference;
* :mod:`lneps.book.printing`: the text tables that print them.
"""

from .. import formats, naive
from . import survey
from ..formats import *  # noqa: F403
from ..oracle import layer_norm_exact, layer_norm_value, rms_norm_exact, rms_norm_value
from .printing import fmt_ulp, text_table
from ..naive import *  # noqa: F403
from .survey import *  # noqa: F403

# (The oracle's own layer_norm and rms_norm stay lneps.oracle's: here they would read as the
# package's.)
__all__ = ["layer_norm_exact", "rms_norm_exact", "layer_norm_value", "rms_norm_value", "fmt_ulp",
           "text_table"]
__all__ += [*formats.__all__, *naive.__all__, *survey.__all__]
