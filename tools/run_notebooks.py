"""Execute notebooks in place, top to bottom, in one fresh kernel each (``make notebooks``).

Timing metadata is not recorded, so re-running an unchanged notebook leaves git clean.
"""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def run(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    nbformat.write(nb, path)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"executing {arg}", flush=True)
        run(Path(arg))
