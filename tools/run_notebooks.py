"""Execute notebooks in place (``make notebooks``): top to bottom, each in one fresh kernel.

The book renders the outputs stored in the notebooks and executes nothing; ``make test``
executes every notebook again and compares each output with the stored one (nbval). So after
changing a notebook, or code it calls, run this on it and commit the outputs it writes.
Timing metadata is not recorded, so re-running an unchanged notebook leaves git clean.
"""

import argparse
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        print(f"executing {path}", flush=True)
        run(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
