"""The root conftest.py's worker groups: the trained network's group and the rendered book's
are disjoint, so that `make test`'s two workers can take them side by side; the guide's page
tests sit with the rendered book and its values with the network."""

import glob
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _root_conftest(pytestconfig):
    # the root conftest.py as pytest loaded it (tests/conftest.py shares its module name)
    return next(p for p in pytestconfig.pluginmanager.get_plugins()
                if Path(getattr(p, "__file__", "") or "x").resolve() == ROOT / "conftest.py")


def test_no_test_file_both_reads_the_network_and_uses_the_build(pytestconfig):
    root = _root_conftest(pytestconfig)
    files = sorted(glob.glob(str(ROOT / "tests" / "**" / "*.py"), recursive=True))
    paths = [str(Path(f).relative_to(ROOT)) for f in files]
    both = [p for p in paths if root._uses_build(p) and root._reads_network(p)]
    assert both == []
    groups = {p: root._group(p) for p in paths}
    assert groups["tests/chapters/test_chapter_practical_guide.py"] == "the trained network"
    assert groups["tests/rendered/test_guide_page.py"] == "the rendered book"
    assert root._group("book/trained_network.ipynb") == "the trained network"
    zoo = [p for p in glob.glob("book/*.ipynb", root_dir=ROOT) if root._group(p) == "the kernel zoo"]
    assert {"book/testing_a_kernel.ipynb", "book/how_the_tolerance_is_derived.ipynb"} <= set(zoo)
