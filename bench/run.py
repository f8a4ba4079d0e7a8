"""`make bench`: how long setup, builds and tests take here, next to their floor.

Everything runs in a copy of the working tree under bench/tmp/work (the repository's own _build
is never touched), with this venv linked in, and with PYTHONPATH pointing at the copy's src/ so
the kernels import the copy's lneps, not the tree's editable install. The book's build executes
nothing (_config.yml: execute_notebooks "off"; Sphinx renders the outputs stored in the
notebooks), and `make test` executes every notebook again and compares its outputs (nbval).
The figures:

- setup: a fresh venv from requirements.txt, exactly as the Makefile's stamp rule makes it;
- per-notebook execution: each notebook executed top to bottom in a fresh kernel, serially, by
  nbclient as tools/run_notebooks.py does (nothing written back; LNEPS_CACHE_DIR a fresh empty
  folder, as for `make test` with no _build), timed with time.perf_counter around each: the work
  nbval does in `make test`. Beside it, per notebook, a bare kernel that starts, imports numpy,
  sympy, matplotlib and lneps, and stops (median of 3), so that a notebook's own work is its
  time minus its bare kernel's;
- cold build: `make book` with no _build, with what its log says: documents read, warnings, and
  that nothing was executed (myst-nb logs "Executing notebook using ..." or "Using cached
  notebook" only when it executes a notebook or reads its cache, never with execution off);
- the floor of a build that executes nothing: Sphinx alone, the same `jupyter-book build`
  command run directly rather than through make; and the ratio cold build / floor (wall, CPU);
- warm rebuild (nothing changed); rebuild after editing one markdown cell, and one code cell,
  of the notebook that takes longest to execute, with the notebooks executed read off the log;
- `make test` wall time with the venv present (no _build, as in CI; then with _build);
- lneps.book.symbolic.check_jacobian(d), d = 4 ... 64, each call in a fresh interpreter;
- lneps.layer_norm's correctly rounded default against plain float64 NumPy on 4096 x 4096
  (bench/kernel.py): median ratios per input format, fallback rate and extra memory;
- what grading costs (bench/testing_cost.py): lneps.testing.assert_close's default call against
  torch.testing.assert_close with a float64 reference on 4096 x 4096 float16, bfloat16 and
  float32 (time and extra memory, one thread, a fresh process per case), and 64 x 2**20 float32
  in blocks.

`--only build` measures the build figures alone (per-notebook execution, cold build, floor,
warm rebuild, edits: a few minutes) and merges them into the existing bench/results.json: its
other keys are kept, results["build_measured"] says when, at which commit and under which load
the build figures were taken, and bench/results.md is rendered again from the merged results.

A figure whose first run takes under 10 s is the median of at least 3 runs, and so are the cold
build and the floor (their runs interleaved, so that drifting load hits them alike). Absolute
times drift on a shared machine: compare the ratios. The table is printed as Markdown and
written, with every run and the relevant log lines, to bench/results.json (and bench/results.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import testing_cost  # bench/testing_cost.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
TMP = ROOT / "bench" / "tmp"
LOGS = TMP / "logs"
RESULTS = ROOT / "bench" / "results.json"
TABLE = ROOT / "bench" / "results.md"

REPEAT_UNDER = 10.0  # a figure whose first run is shorter than this is a median of >= 3
DIMS = (4, 8, 16, 32, 64)
FLOOR_IMPORTS = "import numpy, sympy, matplotlib, lneps"
WARNING = re.compile(r"(WARNING|ERROR|CRITICAL):")  # what tests/conftest.py counts
# What myst-nb logs when it executes a notebook (or starts an inline kernel), and when it reads
# its cache; with execute_notebooks "off" it logs none of these.
EXECUTED = re.compile(r"Executing notebook using|Starting inline execution client")
EXECUTION_LOG = re.compile(r"Executing notebook|Executed notebook|Starting inline execution|Using cached notebook|"
                           r"Cached executed notebook|Skipped execution|Excluded from execution")
# make test's budget grew from 90 s to 120 s with the trained-network chapter (issue 12), and to
# 180 s when the slow correctness grids moved to make test-full (issue 34).
NEW_CHAPTERS = ("backward_pass.ipynb", "trained_network.ipynb")
TARGETS = {"new_chapter_own_work_s": 3.0, "cold_over_floor": 1.3, "warm_rebuild_s": 3.0, "check_jacobian_64_s": 2.0,
           "make_test_s": 180.0}
# What `--only build` measures (and replaces in bench/results.json), and what the bench measured
# while the build executed the notebooks (BOOK_JOBS, the prefill): dropped on merging.
BUILD_KEYS = ("build_measured", "notebook_execution_s", "notebook_execution", "cold_build", "floor",
              "ratio_cold_over_floor", "ratio_cold_over_floor_cpu", "warm_rebuild",
              "rebuild_after_markdown_edit", "rebuild_after_code_edit")
OLD_BUILD_KEYS = ("book_jobs", "parallel_speedup", "new_chapter_rerun_s")

# Never copied: the venv (linked instead), build output, git internals, caches, and the arm64
# root of `make portable-arm64` (a Debian tree whose /dev/zero a copy would read forever).
SKIP_TOP = {".venv", "_build", ".git", ".arm64"}
SKIP_ANY = {"__pycache__", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", ".jupyter_cache"}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def copy_tree(dst: Path) -> None:
    def ignore(folder, names):
        here = Path(folder).resolve()
        skip = {n for n in names if n in SKIP_ANY or n.endswith(".egg-info")}
        # only files, folders and links: never a device node or a pipe
        skip |= {n for n in names if not (os.path.islink(os.path.join(folder, n))
                                          or os.path.isfile(os.path.join(folder, n))
                                          or os.path.isdir(os.path.join(folder, n)))}
        if here == ROOT:
            skip |= SKIP_TOP & set(names)
        if here == ROOT / "bench":
            skip |= {"tmp"} & set(names)
        return skip

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT, dst, ignore=ignore, symlinks=True)


MAKE_VARS = {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKE_TERMOUT", "MAKE_TERMERR", "MAKEOVERRIDES"}


def clean_env(extra: dict | None = None) -> dict:
    """This environment without what the outer `make bench` added (make's own variables and
    the Makefile's exports, which point at the tree, not at the copy)."""
    drop = MAKE_VARS | {"PYTHONHASHSEED", "JUPYTER_PATH", "MPLBACKEND"} if os.environ.get("MAKELEVEL") else MAKE_VARS
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra or {})
    return env


def ask_make(work: Path, env: dict, recipe: str) -> str:
    """Run one recipe line in the context of the copy's Makefile; return its output."""
    return subprocess.run(
        ["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-", "bench-ask"],
        input=f"bench-ask:\n\t@{recipe}\n".encode(), cwd=work, env=env, capture_output=True, check=True,
    ).stdout.decode()


def make_env(work: Path, env: dict) -> dict:
    """The environment the copy's Makefile gives its recipes (its exports: PYTHONHASHSEED,
    JUPYTER_PATH, ...), for the commands the bench runs without make."""
    exported = dict(item.split("=", 1) for item in ask_make(work, env, "env -0").split("\0") if "=" in item)
    return {k: v for k, v in exported.items() if k not in MAKE_VARS}


def cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(cmd: list[str], cwd: Path, env: dict, name: str, timeout: float = 1800) -> dict:
    """Run a command; return its wall time, the CPU time of its whole process tree (kernels
    included: each is waited for by its parent), exit code and output (saved in bench/tmp/logs).
    CPU time hardly moves with the load of a shared machine, so it measures work; wall time
    is what a person waits, and what parallel execution shortens."""
    cpu = cpu_of_children()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    cpu = cpu_of_children() - cpu
    output = proc.stdout + proc.stderr
    (LOGS / f"{name}.log").write_text(f"$ {' '.join(cmd)}\n# {seconds:.2f} s wall, {cpu:.2f} s CPU, "
                                      f"exit {proc.returncode}\n{output}")
    return {"seconds": seconds, "cpu": cpu, "code": proc.returncode, "output": output, "stdout": proc.stdout}


def repeated(fn, runs: int | None = None) -> dict:
    """Call fn() (which returns a run dict) once, or 3 times if the first run is short."""
    first = fn(0)
    results = [first]
    wanted = runs or (3 if first["seconds"] < REPEAT_UNDER else 1)
    for i in range(1, wanted):
        results.append(fn(i))
    secs = [r["seconds"] for r in results]
    cpus = [r["cpu"] for r in results if "cpu" in r]
    return {
        "median": statistics.median(secs),
        "runs": [round(s, 3) for s in secs],
        "cpu_median": statistics.median(cpus) if cpus else None,
        "last": results[-1],
        "all": results,
    }


def one_line(text: str, limit: int = 300) -> str:
    """An error for the table: without colours, its last non-empty line (the exception)."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines() if line.strip()]
    return (lines[-1] if lines else "").replace("|", "/")[:limit]


def build_facts(output: str) -> dict:
    """What a build's log says: myst-nb's execution mode, notebooks executed, cache hits,
    warnings, documents read."""
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)  # Sphinx's colours
    mode = re.search(r"execution_mode='(\w+)'", output)  # myst-nb's NbParserConfig line
    updated = re.search(r"updating environment: .*?(\d+) added, (\d+) changed, (\d+) removed", output)
    return {
        "execution_mode": mode.group(1) if mode else None,
        "notebooks_executed": len(EXECUTED.findall(output)),
        "cache_hits": len(re.findall(r"Using cached notebook", output)),
        "docs_added_changed": [int(updated.group(1)), int(updated.group(2))] if updated else None,
        "warnings": [line for line in output.splitlines() if WARNING.search(line)],
        "execution_log_lines": [line.strip() for line in output.splitlines() if EXECUTION_LOG.search(line)],
        "log_lines": [
            line.strip()
            for line in output.splitlines()
            if re.search(r"^\$ |jupyter-book build|updating environment|building from scratch|build succeeded"
                         r"|build finished|Running Sphinx", line)
        ],
    }


def execute_notebooks(book: Path, bare_runs: int) -> None:
    """(Run in a subprocess, under the kernels' environment.) Per notebook, serially: a bare
    kernel bare_runs times (start, import the stack, stop), then the notebook once, top to
    bottom, each in a fresh kernel, by nbclient as tools/run_notebooks.py runs it (nothing is
    written back). Wall time from time.perf_counter; CPU time of this process and its kernels."""
    import nbformat
    from nbclient import NotebookClient

    def timed(nb) -> dict:
        own = resource.getrusage(resource.RUSAGE_SELF)
        cpu = cpu_of_children() + own.ru_utime + own.ru_stime
        start = time.perf_counter()
        error = None
        try:
            NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                           resources={"metadata": {"path": str(book)}}).execute()
        except Exception as exc:  # a failing notebook is reported, the others still timed
            error = one_line(str(exc)) or type(exc).__name__
        seconds = time.perf_counter() - start
        own = resource.getrusage(resource.RUSAGE_SELF)
        return {"seconds": seconds, "cpu": cpu_of_children() + own.ru_utime + own.ru_stime - cpu, "error": error}

    result = {}
    for path in sorted(book.glob("*.ipynb")):
        bare = [timed(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FLOOR_IMPORTS)]))
                for _ in range(bare_runs)]
        if any(b["error"] for b in bare):
            raise SystemExit(f"a bare kernel failed before {path.name}: {next(b['error'] for b in bare if b['error'])}")
        result[path.name] = {"notebook": timed(nbformat.read(path, as_version=4)), "bare": bare}
        print(f"{path.name}: {result[path.name]['notebook']['seconds']:.2f} s", file=sys.stderr, flush=True)
    print(json.dumps(result))


def edit_notebook(path: Path, kind: str, k: int) -> str:
    """Change one cell: append a paragraph to the first markdown cell, or prepend a comment to
    the first code cell. Returns what was changed."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == kind)
    if kind == "markdown":
        cell.source = cell.source.rstrip("\n") + f"\n\nBenchmark edit number {k}."
    else:
        cell.source = f"# benchmark edit number {k}\n" + cell.source
    nbformat.write(nb, path)
    return f"{kind} cell {nb.cells.index(cell)} of {path.name}"


def pytest_breakdown(output: str) -> dict:
    """Seconds per kind of test item, from pytest's --durations=0 table."""
    sums = {"nbval_notebooks": 0.0, "book_build_test": 0.0, "browser_tests": 0.0, "other_tests": 0.0}
    for secs, _, item in re.findall(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)", output, re.M):
        key = (
            "nbval_notebooks" if item.startswith("book/")
            else "book_build_test" if "test_book_build" in item
            else "browser_tests" if "test_browser" in item
            else "other_tests"
        )
        sums[key] += float(secs)
    summary = re.findall(r"^=+ (.*(?:passed|failed|error).*) =+$", output, re.M)
    return {**{k: round(v, 2) for k, v in sums.items()}, "summary": summary[-1] if summary else None}


def setup_time(env: dict) -> dict:
    """A fresh venv made by the Makefile's own stamp rule, in a fresh copy of the tree."""
    where = TMP / "setup"
    copy_tree(where)
    pip = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout.strip()
    cache_bytes = (sum(f.stat().st_size for f in Path(pip).rglob("*") if f.is_file())
                   if pip and Path(pip).is_dir() else 0)
    sources = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    try:
        r = run(["make", "--no-print-directory", ".venv/.installed"], where, env, "setup", timeout=1800)
        check = subprocess.run([str(where / ".venv/bin/python"), "-c", "import lneps, myst_nb, nbval, jupyter_book"],
                               capture_output=True, text=True)
        size = subprocess.run(["du", "-sm", str(where / ".venv")], capture_output=True, text=True).stdout.split()[:1]
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return {
        "seconds": r["seconds"],
        "code": r["code"],
        "imports_ok": check.returncode == 0,
        "venv_mb": int(size[0]) if size else None,
        "pip_cache": (f"{pip}: {cache_bytes / 1e6:.0f} MB before the install "
                      f"({'warm' if cache_bytes > 1e6 else 'cold'})"),
        "package_sources": " ".join(line for line in sources.splitlines() if "index" in line or "find-links" in line),
    }


def time_check_jacobian(work: Path, env: dict) -> dict:
    code = (
        "import json, sys, time\n"
        "import lneps.book.symbolic as s\n"
        "f = getattr(s, 'check_jacobian', None)\n"
        "if f is None: print(json.dumps({'missing': True})); sys.exit()\n"
        "t = time.perf_counter(); r = f(int(sys.argv[1])); t = time.perf_counter() - t\n"
        "print(json.dumps({'seconds': t, 'result': repr(r)[:80]}))\n"
    )
    results = {}
    for d in DIMS:
        def once(i, d=d):
            try:
                proc = subprocess.run([sys.executable, "-c", code, str(d)], cwd=work, env=env, capture_output=True,
                                      text=True, timeout=300)
            except subprocess.TimeoutExpired:
                return {"seconds": 300.0, "error": "timeout after 300 s"}
            if proc.returncode != 0:
                error = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
                return {"seconds": 0.0, "error": error}
            return json.loads(proc.stdout.strip().splitlines()[-1])

        first = once(0)
        if first.get("missing"):
            return {str(d): "n/a (lneps.book.symbolic.check_jacobian does not exist yet)" for d in DIMS}
        if "error" in first:
            results[str(d)] = {"error": first["error"]}
            break  # larger d would fail (or time out) too
        runs = [first] + [once(i) for i in range(1, 3 if first["seconds"] < REPEAT_UNDER else 1)]
        results[str(d)] = {
            "median": statistics.median(r["seconds"] for r in runs),
            "runs": [round(r["seconds"], 4) for r in runs],
            "result": first.get("result"),
        }
    return results


def fmt(seconds) -> str:
    return f"{seconds:.2f} s" if isinstance(seconds, (int, float)) else str(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description="Time setup, builds and tests (see the module docstring).")
    parser.add_argument("--skip-setup", action="store_true",
                        default=os.environ.get("BENCH_SKIP_SETUP", "") in {"1", "yes", "true"})
    parser.add_argument(
        "--only", choices=["build"],
        help="build: only the build figures (per-notebook execution, cold build, floor, warm rebuild, edits), "
             "merged into the existing bench/results.json",
    )
    parser.add_argument(
        "--cold-runs", type=int, default=int(os.environ.get("BENCH_COLD_RUNS", 0)) or None,
        help="runs of the cold build and of the floor (default 3; env BENCH_COLD_RUNS)",
    )
    parser.add_argument("--keep", action="store_true", help="keep bench/tmp/work afterwards")
    parser.add_argument("--execute-notebooks", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bare-runs", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.execute_notebooks:
        execute_notebooks(args.execute_notebooks, args.bare_runs)
        return 0
    only_build = args.only == "build"

    venv = Path(sys.prefix)
    stamp = venv / ".installed"
    if sys.prefix == sys.base_prefix or not stamp.exists():
        raise SystemExit("run this through `make bench`, with the project's installed venv")
    TMP.mkdir(exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None
    build: dict = {"when": when, "commit": commit, "machine": {"cpus": os.cpu_count(),
                                                               "load_avg_start": os.getloadavg()}, "notes": []}
    notes = build["notes"]  # what the build figures need said; a full run's notes too
    results: dict = {"build_measured": build}
    if not only_build:
        results = {
            "when": when,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": os.getloadavg()},
            "commit": commit,
            "notes": [],
            "build_measured": build,
        }
    base_env = clean_env()

    # Setup first, while the copy for the rest is not made yet.
    if not only_build:
        if args.skip_setup:
            results["setup"] = "skipped (BENCH_SKIP_SETUP=1)"
        else:
            log("setup: fresh venv from requirements.txt (about a minute)")
            results["setup"] = setup_time(base_env)

    work = TMP / "work"
    copy_tree(work)
    (work / ".venv").symlink_to(venv)
    # The copy's pins are as old as the tree's; keep make from rebuilding the linked venv.
    for name in ("requirements.txt", "requirements-model.txt", "pyproject.toml"):
        f = work / name
        if f.exists() and f.stat().st_mtime > stamp.stat().st_mtime:
            os.utime(f, (stamp.stat().st_mtime - 1, stamp.stat().st_mtime - 1))
            notes.append(f"{name} is newer than the venv: run `make book` to reinstall before trusting these figures")
    # make's recipes get the Makefile's exports; the commands run without make get the same.
    env = make_env(work, clean_env({"PYTHONPATH": str(work / "src")}))
    make = ["make", "--no-print-directory"]
    # The command `make book` runs with no _build (BOOK_ALL is then --all), run directly.
    jb = [str(work / ".venv/bin/jupyter-book"), "build", ".", *ask_make(work, env, "echo $(BOOK_FLAGS)").split(),
          "--all"]

    # What nbval does in make test: each notebook in a fresh kernel, serially; and a bare kernel.
    log("per-notebook execution: each notebook in a fresh kernel, serially, beside a bare kernel (a few minutes)")
    nb_cache = TMP / "lneps-cache"
    shutil.rmtree(nb_cache, ignore_errors=True)
    nb_cache.mkdir()
    ex = run([sys.executable, str(Path(__file__).resolve()), "--execute-notebooks", str(work / "book")],
             work, dict(env, LNEPS_CACHE_DIR=str(nb_cache)), "notebooks", timeout=3600)
    shutil.rmtree(nb_cache, ignore_errors=True)
    if ex["code"] != 0:
        raise SystemExit(f"executing the notebooks failed:\n{ex['output'][-2000:]}")
    executed = json.loads(ex["stdout"].strip().splitlines()[-1])
    per_nb = {k: v["notebook"]["seconds"] for k, v in executed.items()}
    errors = {k: v["notebook"]["error"] for k, v in executed.items() if v["notebook"]["error"]}
    for name, error in errors.items():
        notes.append(f"{name} failed when executed alone: {one_line(error, 200)}")
    ok = {k: s for k, s in per_nb.items() if k not in errors}
    results["notebook_execution_s"] = {k: round(v, 3) for k, v in sorted(per_nb.items())}
    results["notebook_execution"] = {
        "how": "each notebook top to bottom in a fresh kernel, serially (nbclient, as tools/run_notebooks.py); "
               "LNEPS_CACHE_DIR a fresh empty folder; kernel start and stop included",
        "total_s": round(sum(per_nb.values()), 3),
        "total_cpu_s": round(sum(v["notebook"]["cpu"] for v in executed.values()), 3),
        "longest": max(ok, key=ok.get) if ok else None,
        "cpu_s": {k: round(v["notebook"]["cpu"], 3) for k, v in sorted(executed.items())},
        "errors": errors,
        "bare_kernel": {
            k: {"median": round(statistics.median(b["seconds"] for b in v["bare"]), 3),
                "runs": [round(b["seconds"], 3) for b in v["bare"]],
                "cpu_median": round(statistics.median(b["cpu"] for b in v["bare"]), 3)}
            for k, v in sorted(executed.items())
        },
        "kernel_cell": FLOOR_IMPORTS,
    }

    def built(cmd: list[str], name: str) -> dict:
        shutil.rmtree(work / "_build", ignore_errors=True)
        r = run(cmd, work, env, name)
        r["facts"] = build_facts(r["output"])
        if r["code"] != 0:
            notes.append(f"{name} exited {r['code']}: see bench/tmp/logs/{name}.log")
        return r

    # Interleaved, and in alternating order, so that drifting load hits both alike.
    runs = args.cold_runs or 3
    log(f"cold builds (`make book`, no _build) and the floor (`jupyter-book build` alone), {runs} runs each")
    colds, floors = [], []
    for i in range(runs):
        steps = [(colds, make + ["book"], f"cold-{i}"), (floors, jb, f"floor-{i}")]
        for into, cmd, name in (steps if i % 2 == 0 else steps[::-1]):
            into.append(built(cmd, name))

    def summary(rs: list[dict]) -> dict:
        return {
            "median": statistics.median(r["seconds"] for r in rs),
            "runs": [round(r["seconds"], 3) for r in rs],
            "cpu_median": statistics.median(r["cpu"] for r in rs),
            "cpu_runs": [round(r["cpu"], 3) for r in rs],
            "codes": [r["code"] for r in rs],
            "notebooks_executed": max(r["facts"]["notebooks_executed"] for r in rs),
            "facts": rs[-1]["facts"],
        }

    results["cold_build"] = {"command": "make book", **summary(colds)}
    fl = summary(floors)
    results["floor"] = {"seconds": fl["median"], "cpu": fl["cpu_median"],
                        "command": " ".join(["jupyter-book", *jb[1:]]), **fl}
    results["ratio_cold_over_floor"] = round(results["cold_build"]["median"] / fl["median"], 3)
    results["ratio_cold_over_floor_cpu"] = round(results["cold_build"]["cpu_median"] / fl["cpu_median"], 3)
    for r in colds + floors:
        if r["facts"]["execution_log_lines"]:
            notes.append(f"a build logged execution: {r['facts']['execution_log_lines'][:3]}")
            break

    # Warm state: build once (untimed) so that the warm figures start from a complete _build.
    built(make + ["book"], "warm-prepare")
    log("warm rebuilds")

    def warm(i):
        r = run(make + ["book"], work, env, f"warm-{i}")
        r["facts"] = build_facts(r["output"])
        return r

    w = repeated(warm, runs=5)
    results["warm_rebuild"] = {"median": w["median"], "runs": w["runs"], "cpu_median": w["cpu_median"],
                               "notebooks_executed": max(r["facts"]["notebooks_executed"] for r in w["all"]),
                               "facts": w["last"]["facts"]}

    # Edit the notebook that takes longest to execute: executing it by mistake would show.
    target = results["notebook_execution"]["longest"] or sorted(per_nb)[0]
    path = work / "book" / target
    pristine = path.read_bytes()
    for kind in ("markdown", "code"):
        log(f"rebuild after editing one {kind} cell of {target}")

        def edited(i, kind=kind):
            what = edit_notebook(path, kind, i + 1)
            r = run(make + ["book"], work, env, f"edit-{kind}-{i}")
            r["facts"] = build_facts(r["output"])
            r["edited"] = what
            return r

        e = repeated(edited)
        results[f"rebuild_after_{kind}_edit"] = {
            "median": e["median"],
            "runs": e["runs"],
            "cpu_median": e["cpu_median"],
            "edited": e["last"]["edited"],
            "notebooks_executed": max(r["facts"]["notebooks_executed"] for r in e["all"]),
            "facts": e["last"]["facts"],
        }
        path.write_bytes(pristine)
        run(make + ["book"], work, env, f"edit-{kind}-restore")
    build["machine"]["load_avg_end"] = os.getloadavg()

    if only_build:
        old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        for key in BUILD_KEYS + OLD_BUILD_KEYS:
            old.pop(key, None)
        results = {**old, **results}
        results["targets"] = evaluate(results)
        finish(results, work, args.keep)
        return 0

    log("make test, no _build (as in CI), then again with _build")
    test_env = dict(env, PYTEST_ADDOPTS="--durations=0")
    shutil.rmtree(work / "_build", ignore_errors=True)
    t_cold = run(make + ["test"], work, test_env, "test-cold")
    t_warm = run(make + ["test"], work, test_env, "test-warm")
    results["make_test"] = {
        "cold_build_dir": {"seconds": t_cold["seconds"], "cpu": t_cold["cpu"], "code": t_cold["code"],
                           **pytest_breakdown(t_cold["output"])},
        "warm_build_dir": {"seconds": t_warm["seconds"], "cpu": t_warm["cpu"], "code": t_warm["code"],
                           **pytest_breakdown(t_warm["output"])},
    }

    log("check_jacobian(d), each call in a fresh interpreter")
    results["check_jacobian_s"] = time_check_jacobian(work, env)
    log("layer_norm's correctly rounded default against plain float64 NumPy, 4096 x 4096")
    kr = run([sys.executable, str(work / "bench" / "kernel.py")], work, env, "kernel-speed")
    results["kernel_speed"] = (json.loads(kr["stdout"].strip().splitlines()[-1]) if kr["code"] == 0
                               else {"error": kr["output"][-500:]})
    log("grading cost: lneps.testing.assert_close against torch.testing.assert_close, each case in a fresh process")
    tc = run([sys.executable, str(work / "bench" / "testing_cost.py"), "--json"], work, env, "testing-cost",
             timeout=3600)
    results["testing_cost"] = (json.loads(tc["stdout"].strip().splitlines()[-1]) if tc["code"] == 0
                               else {"error": tc["output"][-500:]})
    results["notes"] = notes + [f"grading cost: {n}" for n in results["testing_cost"].get("notes", [])]
    results["machine"]["load_avg_end"] = os.getloadavg()

    results["targets"] = evaluate(results)
    finish(results, work, args.keep)
    return 0


def finish(results: dict, work: Path, keep: bool) -> None:
    table = render(results)
    print("\n" + table)
    TABLE.write_text(table + "\n")
    RESULTS.write_text(json.dumps(strip(results), indent=1) + "\n")
    log(f"wrote {RESULTS.relative_to(ROOT)} and {TABLE.relative_to(ROOT)}; logs in {LOGS.relative_to(ROOT)}")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)


def strip(obj):
    """Results without the bulky raw outputs."""
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if k not in {"output", "stdout", "all", "last"}}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj


def new_layout(r: dict) -> bool:
    """The build figures measured as the build is now (it executes nothing), rather than while it
    executed the notebooks (a results.json from before: BOOK_JOBS variants, a prefill)."""
    return isinstance(r.get("cold_build"), dict) and "median" in r["cold_build"]


def own_work(r: dict) -> dict:
    """Seconds a notebook's execution took beyond its bare kernel (start, imports, stop)."""
    ne = r.get("notebook_execution", {})
    bare, errors = ne.get("bare_kernel", {}), ne.get("errors", {})
    return {name: secs - bare[name]["median"] for name, secs in r.get("notebook_execution_s", {}).items()
            if name in bare and name not in errors}


def evaluate(r: dict) -> dict:
    out = {}
    limit = TARGETS["cold_over_floor"]
    if new_layout(r):
        wall, cpu = r["ratio_cold_over_floor"], r["ratio_cold_over_floor_cpu"]
        out[f"cold build <= {limit:g} x floor (wall; {wall:.2f} x)"] = wall <= limit
        out[f"cold build <= {limit:g} x floor (CPU time; {cpu:.2f} x)"] = cpu <= limit
        out["cold build executes nothing"] = r["cold_build"]["notebooks_executed"] == 0
        warm = TARGETS["warm_rebuild_s"]
        out[f"warm rebuild <= {warm:g} s"] = r["warm_rebuild"]["median"] <= warm
        out["warm rebuild executes nothing"] = r["warm_rebuild"]["notebooks_executed"] == 0
        for kind in ("markdown", "code"):
            out[f"{kind} edit executes nothing"] = r[f"rebuild_after_{kind}_edit"]["notebooks_executed"] == 0
        own, ne = own_work(r), r["notebook_execution"]
        for name in NEW_CHAPTERS:
            if name in own:
                cpu = ne["cpu_s"][name] - ne["bare_kernel"][name]["cpu_median"]
                target = TARGETS["new_chapter_own_work_s"]
                out[f"{name}: own work <= {target:g} s, executed in a fresh kernel "
                    f"less its bare kernel ({own[name]:.2f} s; CPU {cpu:.2f} s)"] = own[name] <= target
        for name, error in r["notebook_execution"].get("errors", {}).items():
            out[f"{name} executes without error"] = False
    cj = r.get("check_jacobian_s", {}).get("64")
    if cj is not None:
        cj64 = cj["median"] if isinstance(cj, dict) and "median" in cj else None
        out["check_jacobian(64) < 2 s"] = (cj64 < TARGETS["check_jacobian_64_s"]) if cj64 is not None else "n/a"
    if "make_test" in r:
        target = TARGETS["make_test_s"]
        seconds = r["make_test"]["cold_build_dir"]["seconds"]
        out[f"make test < {target:g} s (venv present, no _build)"] = seconds < target
    speeds = {name: k for name, k in r.get("kernel_speed", {}).items() if isinstance(k, dict)}
    for name, k in speeds.items():
        if not _against_typical(k):
            out[f"layer_norm default, {name} input <= {k['target']:g} x plain float64 ({k['ratio']:.2f} x)"] = (
                k["ratio"] <= k["target"])
    for name, k in speeds.items():
        if _against_typical(k):
            what = f"{'' if 'op' in k else 'layer_norm default, '}{name.split(',')[0]}"
            out[f"{what} <= {k['target']:g} x N(0,1) rows ({k['ratio']:.2f} x)"] = k["ratio"] <= k["target"]
    for name, k in r.get("kernel_speed", {}).items():
        if isinstance(k, dict) and "extra_memory_mb" in k:
            what = name.split(",")[0] if "op" in k else "float32 one row of 2**22"
            out[f"{what}: extra memory <= {k['memory_target_mb']:g} MB ({k['extra_memory_mb']:.1f} MB)"] = (
                k["extra_memory_mb"] <= k["memory_target_mb"])
    out.update(testing_cost.targets(r["testing_cost"]) if "testing_cost" in r else {})
    return out


def _against_typical(k: dict) -> bool:
    """The worst-case families and the long row are timed against lneps on N(0, 1) rows of the
    same format and shape (bench/kernel.py), not against plain float64."""
    return "family" in k or "extra_memory_mb" in k


def _load(m: dict, key: str = "") -> str:
    avg = m.get(f"load_avg_start{key}"), m.get(f"load_avg_end{key}")
    return " -> ".join(f"{a[0]:.1f}" for a in avg if a) or "n/a"


def build_rows(r: dict) -> list[tuple[str, str, str]]:
    """The rows of the build figures (and of the notebooks' execution, which nbval repeats)."""
    rows = []
    if "cold_build" not in r:
        return rows
    if not new_layout(r):
        return [("Build figures", "old layout",
                 "measured while the build executed the notebooks (BOOK_JOBS, prefill); not shown: "
                 "run `bench/run.py --only build` to measure the build as it is now")]
    ne = r.get("notebook_execution", {})
    bare, cpus, errors = ne.get("bare_kernel", {}), ne.get("cpu_s", {}), ne.get("errors", {})
    own = own_work(r)
    for name, secs in r.get("notebook_execution_s", {}).items():
        b = bare.get(name, {})
        notes = [f"CPU {fmt(cpus.get(name))}",
                 f"its bare kernel {fmt(b.get('median'))} (CPU {fmt(b.get('cpu_median'))})"]
        if name in own:
            notes.append(f"{own[name]:+.2f} s of its own work (CPU {cpus[name] - b['cpu_median']:+.2f} s)")
        if name in errors:
            notes.append(f"FAILED: {one_line(errors[name], 150)}")
        rows.append((f"Execution of {name} (fresh kernel, serial)", fmt(secs), "; ".join(notes)))
    if r.get("notebook_execution_s"):
        n = len(r["notebook_execution_s"])
        longest = ne.get("longest")
        typical = statistics.median(b["median"] for b in bare.values()) if bare else None
        rows.append((
            f"Execution of all {n} notebooks, serially (nbval's work in make test)", fmt(ne.get("total_s")),
            f"CPU {fmt(ne.get('total_cpu_s'))}; longest {longest} ({fmt(r['notebook_execution_s'].get(longest))}); "
            f"bare kernels {n} x ~{fmt(typical)} ({FLOOR_IMPORTS!r}), own work {sum(own.values()):.2f} s in all",
        ))
    c, fl = r["cold_build"], r["floor"]
    rows.append((
        "Cold build: make book, no _build", fmt(c["median"]),
        f"runs {c['runs']}; CPU {fmt(c['cpu_median'])} (runs {c['cpu_runs']}); myst-nb execution mode "
        f"{c['facts'].get('execution_mode')}, notebooks executed {c['notebooks_executed']}, "
        f"{len(c['facts']['warnings'])} warnings, documents read {c['facts']['docs_added_changed']}; "
        f"{r['ratio_cold_over_floor']:.2f} x floor (CPU {r['ratio_cold_over_floor_cpu']:.2f} x)",
    ))
    rows.append((
        "Floor: Sphinx alone (the same jupyter-book build, not through make)", fmt(fl["seconds"]),
        f"runs {fl['runs']}; CPU {fmt(fl['cpu'])} (runs {fl['cpu_runs']}); "
        f"notebooks executed {fl['notebooks_executed']}, "
        f"{len(fl['facts']['warnings'])} warnings; `{fl['command']}`",
    ))
    w = r["warm_rebuild"]
    rows.append(("Warm rebuild, nothing changed", fmt(w["median"]),
                 f"runs {w['runs']}; CPU {fmt(w.get('cpu_median'))}; documents re-read "
                 f"{w['facts']['docs_added_changed']}; notebooks executed {w['notebooks_executed']}"))
    for kind in ("markdown", "code"):
        e = r[f"rebuild_after_{kind}_edit"]
        rows.append((f"Rebuild after editing one {kind} cell", fmt(e["median"]),
                     f"runs {e['runs']}; CPU {fmt(e.get('cpu_median'))}; {e['edited']}; "
                     f"documents re-read {e['facts']['docs_added_changed']}; "
                     f"notebooks executed {e['notebooks_executed']}, cache hits {e['facts']['cache_hits']}"))
    return rows


def render(r: dict) -> str:
    rows = []
    s = r.get("setup")
    if isinstance(s, dict):
        rows.append((
            "Setup: fresh venv from requirements.txt",
            fmt(s["seconds"]),
            f"exit {s['code']}, imports ok {s['imports_ok']}, {s['venv_mb']} MB; "
            f"pip's own cache {s['pip_cache'].split('(')[-1].rstrip(')')}; "
            f"packages from: {s['package_sources'] or 'PyPI'}",
        ))
    elif s is not None:
        rows.append(("Setup: fresh venv from requirements.txt", "skipped", s))
    rows += build_rows(r)
    if "make_test" in r:
        for label, t in (("no _build, as in CI", r["make_test"]["cold_build_dir"]),
                         ("with _build", r["make_test"]["warm_build_dir"])):
            rows.append((f"make test ({label})", fmt(t["seconds"]),
                         f"CPU {fmt(t['cpu'])}; exit {t['code']}; {t['summary']}; items' own times: "
                         f"nbval {t['nbval_notebooks']} s, build test {t['book_build_test']} s, "
                         f"browser {t['browser_tests']} s, other {t['other_tests']} s"))
    for d, v in r.get("check_jacobian_s", {}).items():
        if isinstance(v, dict) and "median" in v:
            rows.append((f"check_jacobian({d})", f"{v['median']:.3f} s", f"runs {v['runs']}; returned {v['result']}"))
        else:
            rows.append((f"check_jacobian({d})", "n/a", v if isinstance(v, str) else v.get("error")))
    for name, k in r.get("kernel_speed", {}).items():
        if not isinstance(k, dict):
            rows.append(("layer_norm default vs plain float64", "error", str(k)[:200]))
            continue
        if "op" in k:  # group_norm, batch_norm: per element over layer_norm's N(0, 1) rows
            rows.append((f"{name}, per element over layer_norm's N(0,1) rows", f"{k['ratio']:.2f} x",
                         f"runs {k['ratios']}; {fmt(k['lneps_s'])}; extra memory {k['extra_memory_mb']:.1f} MB "
                         f"({k['extra_memory_float64_copies']:.3f} float64 copies of the input)"))
            continue
        label = (f"layer_norm default, {name}" if _against_typical(k)
                 else f"layer_norm default / plain float64, {name.split(',')[0]} {k.get('shape', '4096 x 4096')}")
        reference = "N(0,1) rows" if _against_typical(k) else "plain"
        rows.append((label, f"{k['ratio']:.2f} x",
                     f"median of pair ratios {k['ratios']}; {reference} {fmt(k['plain_s'])}, "
                     f"lneps {fmt(k['lneps_s'])}; "
                     f"rows in double-double {k['double_double_rows']:.2%}, elements settled exactly "
                     f"{k['exact_elements']} of {k['elements']}; extra memory {k['extra_memory_float64_copies']:.2f} "
                     "float64 copies of the input"))
    if "testing_cost" in r:
        rows += testing_cost.rows(r["testing_cost"])
    bm = r.get("build_measured", {})
    m = r.get("machine", bm.get("machine", {}))
    out = [f"Benchmark {r.get('when', bm.get('when'))}, commit {r.get('commit', bm.get('commit'))}, "
           f"{m.get('cpus')} CPUs, load {_load(m)}"]
    if bm and "when" in r and (bm.get("when"), bm.get("commit")) != (r.get("when"), r.get("commit")):
        out[0] += (f"; build figures (notebook execution, cold build, floor, rebuilds) from "
                   f"`bench/run.py --only build` "
                   f"{bm['when']}, commit {bm['commit']}, load {_load(bm.get('machine', {}))}")
    out += ["", "| figure | time | notes |", "| --- | --- | --- |"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    out += ["", "| target | met |", "| --- | --- |"]
    out += [f"| {k} | {v} |" for k, v in r.get("targets", {}).items()]
    notes = list(r.get("notes", []))
    notes += [n for n in bm.get("notes", []) if n not in notes]
    out += [f"\nNote: {one_line(n, 400)}" for n in notes]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
