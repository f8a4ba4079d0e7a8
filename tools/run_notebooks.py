"""Execute notebooks: in place (``make notebooks``), or into the book's cache (``make book``).

In place: top to bottom, in one fresh kernel each. Timing metadata is not recorded, so
re-running an unchanged notebook leaves git clean.

``--cache DIR --jobs N``: execute, N at a time, the notebooks whose code has no entry in the
jupyter-cache at DIR, and store them there exactly as myst-nb's ``execute_notebooks: cache``
mode would (same jupyter-cache worker, same cwd, timeout and allow_errors, read from
_config.yml). Sphinx then finds every notebook cached and only renders. With ``--signal DIR``, progress is
written to DIR for tools/sphinx_wait_for_prefill.py, so that Sphinx can run at the same time
and read each notebook as soon as it is cached. This is how the book executes notebooks in
parallel: Sphinx's own ``-j`` falls back to a serial read (and warns,
which fails a -W build) because sphinx-multitoc-numbering, which Jupyter Book loads, does not
declare itself parallel-safe. Each notebook still runs alone in its own fresh kernel, so the
outputs do not depend on N.
"""

import argparse
import json
import multiprocessing
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


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


def execute_settings(config: Path) -> dict:
    """The ``execute:`` block of _config.yml, with Jupyter Book's defaults."""
    import yaml

    block = (yaml.safe_load(config.read_text()) or {}).get("execute") or {}
    return {
        "mode": block.get("execute_notebooks", "auto"),
        "timeout": block.get("timeout", 30),
        "allow_errors": block.get("allow_errors", False),
        "run_in_temp": block.get("run_in_temp", False),
        "exclude": block.get("exclude_patterns", []),
    }


def fill_cache(paths: list[Path], cache_dir: Path, jobs: int, config: Path, signal: Path | None = None) -> int:
    """Execute the uncached notebooks among ``paths`` into the cache; return an exit code.
    ``signal``: a folder for tools/sphinx_wait_for_prefill.py's files (``end`` is written
    however this ends)."""
    if signal is None:
        return _fill_cache(paths, cache_dir, jobs, config, None)
    signal.mkdir(parents=True, exist_ok=True)
    code = 1
    try:
        code = _fill_cache(paths, cache_dir, jobs, config, signal)
        return code
    finally:
        _write(signal / "end", str(code))


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(text)
    partial.replace(path)  # atomic: a reader sees all of it or nothing


def _fill_cache(paths, cache_dir, jobs, config, signal) -> int:
    from fnmatch import fnmatch

    from jupyter_cache import get_cache
    from jupyter_cache.executors import basic

    sys.path.insert(0, str(ROOT / "tools"))
    from sphinx_wait_for_prefill import marker

    settings = execute_settings(config)
    if settings["mode"] != "cache":
        print(f"execute_notebooks is {settings['mode']!r}, not 'cache': nothing to prefill")
        return 0
    paths = [p for p in paths if not any(fnmatch(str(p), pat) for pat in settings["exclude"])]
    cache = get_cache(str(cache_dir))
    # myst-nb names a notebook by its absolute path; matching is by code-cell hash anyway.
    uris = [str(p.resolve()) for p in paths]
    for uri in uris:
        cache.add_nb_to_project(uri)
    # In name order, the order in which Sphinx reads them.
    todo = sorted(cache.list_unexecuted(filter_uris=uris), key=lambda r: r.uri)
    if signal is not None:
        _write(signal / "todo.json", json.dumps([r.uri for r in todo]))
    if not todo:
        return 0
    worker = basic.ExecutionWorkerTempMProc() if settings["run_in_temp"] else basic.ExecutionWorkerLocalMProc()
    tasks = [
        basic.ProcessData(r.pk, r.uri, cache, settings["timeout"], settings["allow_errors"])
        for r in todo
    ]
    jobs = max(1, min(jobs, len(tasks)))
    print(f"executing {len(tasks)} notebook(s), {jobs} at a time", flush=True)

    def finished(result):
        if signal is not None:
            _write(marker(signal, result[1]), str(result[0]))
        return result

    if jobs == 1:
        results = [finished(worker(t)) for t in tasks]
    else:
        # fork: the workers inherit the environment (PYTHONHASHSEED, MPLBACKEND, ...) as is.
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = [finished(r) for r in pool.imap_unordered(worker, tasks, chunksize=1)]
    failed = [uri for code, uri in results if code != 0]
    for uri in failed:
        record = cache.get_project_record(uri)
        print(f"\nexecuting {uri} failed:\n{record.traceback or '(no traceback stored)'}", file=sys.stderr)
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--cache", type=Path, help="fill this jupyter-cache instead of writing the notebooks")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks executed at a time (with --cache)")
    parser.add_argument("--config", type=Path, default=ROOT / "_config.yml")
    parser.add_argument("--signal", type=Path, help="with --cache: write progress here for tools/sphinx_wait_for_prefill.py")
    args = parser.parse_args(argv)
    if args.cache is not None:
        return fill_cache(args.notebooks, args.cache, args.jobs, args.config, args.signal)
    for path in args.notebooks:
        print(f"executing {path}", flush=True)
        run(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
