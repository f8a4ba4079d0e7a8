"""Loaded for every test, the notebooks' cells included (tests/conftest.py is not, for book/)."""

import nbval.plugin

# A glued figure is stored twice: as PNG bytes (application/papermill.record/image/png), which
# differ between CPUs (anti-aliasing arithmetic, x86 against arm64), and as text, which
# lneps.book.figures.describe fills with what the figure shows: its texts and the numbers it plots.
# nbval already skips a plain image/png; it skips the glued PNG too and compares the text.
_nbval_init = nbval.plugin.IPyNbFile.__init__


def _compare_figures_by_what_they_show(self, *args, **kwargs):
    _nbval_init(self, *args, **kwargs)
    self.skip_compare = self.skip_compare + ("application/papermill.record/image/png",)


nbval.plugin.IPyNbFile.__init__ = _compare_figures_by_what_they_show
