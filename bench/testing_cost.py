"""What grading costs: lneps.testing.assert_close against torch.testing.assert_close.

The issue "lneps.testing, sharp", item 7: grading a 4096 x 4096 layer_norm output in float16,
bfloat16 and float32 with the default call

    lneps.testing.assert_close(actual, x=x, eps=1e-5)        # the derived tolerance, no max_ulp

must cost at most TIME_TARGET (3) times the wall time and MEMORY_TARGET (1.5) times the extra
memory of what a kernel engineer writes with torch.testing, reference included:

    expected = torch.nn.functional.layer_norm(x_t.double(), (d,), eps=1e-5).to(actual_t.dtype)
    torch.testing.assert_close(actual_t, expected)

A float64 reference cast back to the kernel's format, compared with torch.testing's defaults
for that format (float16: rtol 1e-3, atol 1e-5; bfloat16: rtol 1.6e-2, atol 1e-5; float32:
rtol 1.3e-6, atol 1e-5): the call
torch.testing's documentation leads to, since its default ``check_dtype=True`` refuses a
float64 ``expected`` for a float16 ``actual``. The other reading, the float64 reference kept
and ``check_dtype=False`` (both promoted to float64, the looser format's tolerances), is
timed too, for information; the targets are judged against the first. Both timings include
computing the reference, as lneps's include computing its own.

And one case without a counterpart target: 64 x 2**20 float32 (256 MB of input, whose
float64 per-element arrays would take gigabytes), graded in blocks: its time and peak extra
memory with the default call (torch's figures beside it, for scale).

``actual`` is a correct kernel's output: a float32 two-pass NumPy kernel (x in float32, its
mean, v = x - mean, v / sqrt(mean(v*v) + eps)) rounded to the format, computed block by
block; torch's assertion gets the same numbers as tensors (``torch.from_numpy``, no copy), so
both tools grade the same output, and both must pass.

Every case runs in a fresh subprocess with one thread (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS
and MKL_NUM_THREADS = 1 in its environment before any import; ``torch.set_num_threads(1)``).
There the inputs are made, the grading function is called once on a tiny input (imports and
first-call set-up are not the figure), then the grading call is timed RUNS times (once for
the long case); the figure is the fastest run. Extra memory is the peak RSS during a call
minus the RSS just before it (VmHWM and VmRSS of /proc/self/status), the high-water mark
reset before each call by writing "5" to /proc/self/clear_refs; the figure is the largest of
the runs (the first run sees memory the allocator keeps for the next ones). Where the reset
is refused only the first run counts for memory (the inputs are made in blocks, so the
high-water mark they leave is a few MB above the RSS before the call at most).

Alone: ``python bench/testing_cost.py`` prints a Markdown table (``--quick``: 1024 x 1024 and
8 x 2**20; ``--json``: one line of JSON instead, which ``bench/run.py`` reads and stores under
the key ``testing_cost`` of bench/results.json; ``--write``: store it there from here, the
other keys kept). Without torch, lneps's figures alone, and a note saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
RESULTS = HERE.parent / "results.json"
SHAPE = (4096, 4096)
QUICK_SHAPE = (1024, 1024)
LONG_SHAPE = (64, 1 << 20)
QUICK_LONG_SHAPE = (8, 1 << 20)
DTYPES = ("float16", "bfloat16", "float32")
EPS = 1e-5
RUNS = 3
TIME_TARGET = 3.0
MEMORY_TARGET = 1.5
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
BLOCK_ELEMENTS = 1 << 18  # rows per block when making the inputs: a few MB of temporaries
TIMEOUT = 3600

LNEPS_CALL = "lneps.testing.assert_close(actual, x=x, eps=1e-5)"
TORCH_CALL = (
    "torch.testing.assert_close(actual_t, torch.nn.functional.layer_norm(x_t.double(), (d,), "
    "eps=1e-5).to(actual_t.dtype))"
)
TORCH_CALL_NO_DTYPE = (
    "torch.testing.assert_close(actual_t, torch.nn.functional.layer_norm(x_t.double(), (d,), "
    "eps=1e-5), check_dtype=False)"
)
TORCH_CALL_REFERENCE_GIVEN = (
    "torch.testing.assert_close(actual_t, expected)  # expected made beforehand, untimed"
)
TOOLS = {
    "lneps": LNEPS_CALL,
    "torch": TORCH_CALL,
    "torch_check_dtype_false": TORCH_CALL_NO_DTYPE,
    "torch_reference_given": TORCH_CALL_REFERENCE_GIVEN,
}


# --- in the subprocess: one case --------------------------------------------------------------


def _status() -> dict:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    return out


def _reset_high_water_mark() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _inputs(np, dtype, shape, seed=0):
    """x ~ N(0, 1) in ``dtype`` and a correct kernel's output for it (float32 two-pass NumPy,
    rounded to ``dtype``), made a block of rows at a time."""
    rows, d = shape
    rng = np.random.default_rng(seed)
    x = np.empty(shape, dtype=dtype)
    actual = np.empty(shape, dtype=dtype)
    step = max(1, BLOCK_ELEMENTS // d)
    eps = np.float32(EPS)
    for i in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - i), d), dtype=np.float32)
        x[i : i + step] = block
        x32 = x[i : i + step].astype(np.float32)
        v = x32 - x32.mean(axis=-1, keepdims=True)
        actual[i : i + step] = v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)
    return x, actual


def _case(tool: str, dtype_name: str, shape: tuple, runs: int, max_ulp: float | None) -> dict:
    for var in THREAD_VARS:  # the parent sets them too; here before NumPy or torch is imported
        os.environ[var] = "1"
    import gc

    import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
    import numpy as np

    dtype = np.dtype(dtype_name)
    if tool == "lneps":
        import lneps.testing

        kw = {} if max_ulp is None else {"max_ulp": max_ulp}

        def prepare(x, actual):
            return x, actual

        def grade(x, actual):
            return lneps.testing.assert_close(actual, x=x, eps=EPS, **kw)

        version = getattr(lneps, "__version__", None)
    else:
        import torch
        import torch.nn.functional as F

        torch.set_num_threads(1)
        keep = tool == "torch_check_dtype_false"
        given = tool == "torch_reference_given"

        def tensor(a):  # no copy; torch.from_numpy takes no bfloat16 array: its bits, viewed
            if a.dtype.name == "bfloat16":
                return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            return torch.from_numpy(a)

        def prepare(x, actual):
            x_t, actual_t = tensor(x), tensor(actual)
            if given:  # the reference computed here, outside the timing and the memory figure
                return F.layer_norm(x_t.double(), (x_t.shape[-1],), eps=EPS).to(
                    actual_t.dtype
                ), actual_t
            return x_t, actual_t

        def grade(x_t, actual_t):
            if given:  # x_t is the reference here
                return torch.testing.assert_close(actual_t, x_t)
            expected = F.layer_norm(x_t.double(), (x_t.shape[-1],), eps=EPS)
            if keep:
                return torch.testing.assert_close(actual_t, expected, check_dtype=False)
            return torch.testing.assert_close(actual_t, expected.to(actual_t.dtype))

        version = torch.__version__

    # warm-up on a tiny input: lazy imports and first-call set-up are not the figure
    tiny = prepare(*_inputs(np, dtype, (4, 64), seed=1))
    warm_error = None
    try:
        grade(*tiny)
    except AssertionError as e:
        warm_error = str(e).splitlines()[0][:200]
    del tiny

    args = prepare(*_inputs(np, dtype, shape))
    gc.collect()
    seconds, extra, rss_before, passed, error = [], [], None, True, None
    reset_ok = True
    for i in range(runs):
        gc.collect()
        reset_ok = _reset_high_water_mark() and reset_ok
        before = _status()
        t = time.perf_counter()
        try:
            result = grade(*args)
        except AssertionError as e:
            result, passed = None, False
            error = error or "\n".join(str(e).splitlines()[:12])
        t = time.perf_counter() - t
        after = _status()
        del result
        seconds.append(t)
        if reset_ok or i == 0:
            extra.append(max(0, after["VmHWM"] - before["VmRSS"]))
        if i == 0:
            rss_before = before["VmRSS"]
    x = args[0]
    return {
        "tool": tool,
        "call": TOOLS[tool]
        if max_ulp is None
        else LNEPS_CALL.replace(")", f", max_ulp={max_ulp:g})"),
        "dtype": dtype_name,
        "shape": list(shape),
        "version": version,
        "seconds": min(seconds),
        "runs": [round(s, 4) for s in seconds],
        "extra_memory_mb": max(extra) / 2**20,
        "extra_memory_runs_mb": [round(e / 2**20, 2) for e in extra],
        "extra_memory_input_copies": max(extra)
        / (x.numel() * x.element_size() if hasattr(x, "numel") else x.nbytes),
        "rss_before_mb": rss_before / 2**20,
        "hwm_reset": reset_ok,
        "passed": passed,
        "error": error,
        "warm_up_error": warm_error,
        "threads": {
            **{v: os.environ.get(v) for v in THREAD_VARS},
            **(
                {"torch.get_num_threads()": sys.modules["torch"].get_num_threads()}
                if tool != "lneps"
                else {}
            ),
        },
    }


# --- in the parent: the cases, the ratios, the table ------------------------------------------


def _run_case(tool, dtype, shape, runs, max_ulp, python, env, cwd) -> dict:
    cmd = [python, str(HERE), "--case", tool, dtype, str(shape[0]), str(shape[1]), str(runs)]
    if max_ulp is not None:
        cmd += ["--max-ulp", repr(max_ulp)]
    env = dict(os.environ if env is None else env)
    env.update({v: "1" for v in THREAD_VARS})
    try:
        proc = subprocess.run(
            cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return {"tool": tool, "error": f"timeout after {TIMEOUT} s", "failed": True}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (
            proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"
        ).splitlines()[-3:]
        return {"tool": tool, "error": " | ".join(tail)[-500:], "failed": True}
    return json.loads(lines[-1])


def _torch_available(python, env) -> str | None:
    proc = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        env=env,
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def _ok(m) -> bool:
    return isinstance(m, dict) and not m.get("failed")


def measure(
    quick: bool = False,
    *,
    max_ulp: float | None = None,
    python: str | None = None,
    env: dict | None = None,
    cwd=None,
    progress=None,
) -> dict:
    """Every case, each in a fresh subprocess of ``python`` (this interpreter by default)."""
    python = python or sys.executable
    shape = QUICK_SHAPE if quick else SHAPE
    long_shape = QUICK_LONG_SHAPE if quick else LONG_SHAPE
    torch_version = _torch_available(python, env)
    tools = (
        ("lneps", "torch", "torch_check_dtype_false", "torch_reference_given")
        if torch_version
        else ("lneps",)
    )
    notes = []
    if not torch_version:
        notes.append("torch is missing from this environment: lneps's figures alone, no ratios")
    if max_ulp is not None:
        notes.append(
            f"lneps graded with max_ulp={max_ulp:g}, NOT the default (derived) tolerance: "
            "these figures do not judge the targets"
        )
    out = {
        "quick": quick,
        "runs": RUNS,
        "eps": EPS,
        "torch": torch_version,
        "lneps_call": LNEPS_CALL,
        "torch_call": TORCH_CALL,
        "torch_call_info": TORCH_CALL_NO_DTYPE,
        "lneps_max_ulp": max_ulp,
        "targets": {"time": TIME_TARGET, "memory": MEMORY_TARGET},
        "threads": 1,
        "load_avg_start": os.getloadavg(),
        "cases": {},
        "notes": notes,
    }
    plan = [(f"{dt} {shape[0]} x {shape[1]}", dt, shape, RUNS, True) for dt in DTYPES]
    plan.append(
        (
            f"float32 {long_shape[0]} x 2**{long_shape[1].bit_length() - 1}",
            "float32",
            long_shape,
            1,
            False,
        )
    )
    for name, dt, shp, runs, judged in plan:
        case = {"judged": judged}
        for tool in tools:
            if tool in ("torch_check_dtype_false", "torch_reference_given") and not judged:
                continue
            if progress:
                progress(f"grading cost: {name}, {tool}")
            case[tool] = _run_case(
                tool, dt, shp, runs, max_ulp if tool == "lneps" else None, python, env, cwd
            )
        lm, tm = case.get("lneps"), case.get("torch")
        if _ok(lm) and _ok(tm):
            case["time_ratio"] = lm["seconds"] / tm["seconds"]
            case["memory_ratio"] = (
                lm["extra_memory_mb"] / tm["extra_memory_mb"] if tm["extra_memory_mb"] > 0 else None
            )
            rg = case.get("torch_reference_given")
            if _ok(rg):  # the other reading: torch's float64 reference not in its figures
                case["time_ratio_reference_untimed"] = lm["seconds"] / rg["seconds"]
                case["memory_ratio_reference_untimed"] = (
                    lm["extra_memory_mb"] / rg["extra_memory_mb"]
                    if rg["extra_memory_mb"] > 0
                    else None
                )
            if judged and max_ulp is None:  # with max_ulp= given the figures judge nothing
                case["time_target_met"] = case["time_ratio"] <= TIME_TARGET
                case["memory_target_met"] = (
                    case["memory_ratio"] is not None and case["memory_ratio"] <= MEMORY_TARGET
                )
        for tool in tools:
            m = case.get(tool)
            if isinstance(m, dict) and (m.get("failed") or not m.get("passed", True)):
                notes.append(
                    f"{name}: {tool} {'failed to run' if m.get('failed') else 'did not pass'}: "
                    f"{(m.get('error') or '').splitlines()[0][:300] if m.get('error') else ''}"
                )
            if isinstance(m, dict) and m.get("hwm_reset") is False:
                notes.append(
                    f"{name}: {tool}: /proc/self/clear_refs refused, memory from the first run only"
                )
        out["cases"][name] = case
    out["load_avg_end"] = os.getloadavg()
    return out


def targets(r: dict) -> dict:
    """{description: met} for bench/run.py's table of targets."""
    out = {}
    if not isinstance(r, dict) or "cases" not in r:
        return {"lneps.testing grading cost measured": False}
    for name, c in r["cases"].items():
        if not c.get("judged"):
            continue
        if "time_target_met" in c:
            out[
                f"lneps.testing.assert_close, {name}: time <= {TIME_TARGET:g} x torch.testing ({c['time_ratio']:.2f} x)"
            ] = c["time_target_met"]
            mr = c["memory_ratio"]
            out[
                f"lneps.testing.assert_close, {name}: extra memory <= {MEMORY_TARGET:g} x torch.testing "
                f"({'n/a' if mr is None else f'{mr:.2f} x'})"
            ] = c["memory_target_met"]
        else:
            why = (
                "max_ulp given"
                if r.get("lneps_max_ulp") is not None
                else "torch missing or a case failed"
            )
            out[f"lneps.testing.assert_close, {name}: against torch.testing"] = f"n/a ({why})"
    return out


def _fmt_tool(m) -> str:
    if not isinstance(m, dict):
        return "-"
    if m.get("failed"):
        return f"error: {m['error'][:120]}"
    verdict = "passed" if m["passed"] else "FAILED"
    return f"{m['seconds']:.3f} s, {m['extra_memory_mb']:.1f} MB ({verdict})"


def rows(r: dict) -> list[tuple[str, str, str]]:
    """(figure, time, notes) rows in bench/run.py's table."""
    if not isinstance(r, dict) or "cases" not in r:
        return [("lneps.testing grading cost", "error", str(r)[:200])]
    out = []
    for name, c in r["cases"].items():
        lm, tm, tf = c.get("lneps"), c.get("torch"), c.get("torch_check_dtype_false")
        time_col = f"{lm['seconds']:.2f} s" if _ok(lm) else "error"
        notes = [
            f"lneps {_fmt_tool(lm)} (runs {lm.get('runs')}, {lm.get('extra_memory_input_copies', 0):.2f} input copies)"
            if _ok(lm)
            else f"lneps {_fmt_tool(lm)}"
        ]
        if tm is not None:
            notes.append(f"torch.testing {_fmt_tool(tm)}")
        if "time_ratio" in c:
            mr = c["memory_ratio"]
            notes.append(
                f"ratios lneps/torch: time {c['time_ratio']:.2f} x, memory {'n/a' if mr is None else f'{mr:.2f} x'}"
            )
        if tf is not None:
            notes.append(f"torch with check_dtype=False (float64 reference kept) {_fmt_tool(tf)}")
        rg = c.get("torch_reference_given")
        if rg is not None:
            notes.append(
                f"torch.testing with its reference made beforehand (untimed) {_fmt_tool(rg)}"
            )
        if "time_ratio_reference_untimed" in c:
            mu = c["memory_ratio_reference_untimed"]
            notes.append(
                f"ratios lneps/torch, torch's reference untimed: time {c['time_ratio_reference_untimed']:.2f} x, "
                f"memory {'n/a' if mu is None else f'{mu:.2f} x'}"
            )
        out.append(
            (
                f"Grading {name} (lneps.testing.assert_close default vs torch.testing)",
                time_col,
                "; ".join(notes),
            )
        )
    return out


def table(r: dict) -> str:
    lines = [
        f"Grading cost, one thread, fresh process per case; time: best of {r['runs']} calls (1 for the long "
        "case); extra memory: peak RSS during the call minus RSS before it (largest over the calls).",
        f"lneps: `{r['lneps_call']}`"
        + (f" with max_ulp={r['lneps_max_ulp']:g}" if r["lneps_max_ulp"] is not None else ""),
        f"torch {r['torch'] or '(missing)'}: `{r['torch_call']}` (reference computed inside the timed call); "
        f"for information: `{r['torch_call_info']}`, and torch's call with its reference made beforehand, "
        "outside the timing and the memory figure (the ratios in the last columns)",
        f"Load average (1 min) {r['load_avg_start'][0]:.1f} -> {r['load_avg_end'][0]:.1f} on {os.cpu_count()} CPUs: "
        "the cases run one after another, so load that comes and goes moves the ratios.",
        "",
        "| case | lneps time | torch time | time ratio (<= 3) | lneps extra MB | torch extra MB "
        "| memory ratio (<= 1.5) "
        "| torch check_dtype=False | passed (lneps / torch) | time ratio, torch's reference untimed "
        "| memory ratio, torch's reference untimed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, c in r["cases"].items():
        lm, tm, tf = c.get("lneps"), c.get("torch"), c.get("torch_check_dtype_false")

        def cell(m, key, f):
            return f.format(m[key]) if _ok(m) else ("error" if isinstance(m, dict) else "-")

        def met(ratio, ok):
            if ratio is None:
                return "n/a"
            if not c["judged"]:
                return f"{ratio:.2f} x (no target)"
            return f"{ratio:.2f} x" + (
                " (not judged)" if ok is None else " met" if ok else " NOT met"
            )

        tr = met(c.get("time_ratio"), c.get("time_target_met")) if "time_ratio" in c else "-"
        mr = met(c.get("memory_ratio"), c.get("memory_target_met")) if "time_ratio" in c else "-"
        passed = " / ".join(
            ("yes" if m["passed"] else "NO") if _ok(m) else "-" for m in (lm, tm) if m is not None
        )
        lines.append(
            f"| {name} | {cell(lm, 'seconds', '{:.3f} s')} | {cell(tm, 'seconds', '{:.3f} s')} | {tr} "
            f"| {cell(lm, 'extra_memory_mb', '{:.1f}')} | {cell(tm, 'extra_memory_mb', '{:.1f}')} | {mr} "
            f"| {_fmt_tool(tf) if tf is not None else '-'} | {passed} "
            f"| {met(c.get('time_ratio_reference_untimed'), None) if 'time_ratio_reference_untimed' in c else '-'} "
            f"| {met(c.get('memory_ratio_reference_untimed'), None) if 'time_ratio_reference_untimed' in c else '-'} |"
        )
    lines += [f"\nNote: {n}" for n in r["notes"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="What lneps.testing.assert_close costs against torch.testing."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1024 x 1024 and 8 x 2**20 instead of 4096 x 4096 and 64 x 2**20",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one line of JSON (for bench/run.py)"
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="also store the figures under the key testing_cost of bench/results.json (the rest kept)",
    )
    parser.add_argument(
        "--max-ulp",
        type=float,
        default=None,
        help="grade with this max_ulp instead of the default tolerance (development only)",
    )
    parser.add_argument(
        "--case", nargs=5, metavar=("TOOL", "DTYPE", "ROWS", "COLS", "RUNS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.case:
        tool, dtype, rows_, cols, runs = args.case
        print(json.dumps(_case(tool, dtype, (int(rows_), int(cols)), int(runs), args.max_ulp)))
        return 0
    progress = (
        None
        if args.json
        else (
            lambda msg: print(
                f"[testing_cost {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True
            )
        )
    )
    r = measure(args.quick, max_ulp=args.max_ulp, progress=progress)
    print(json.dumps(r) if args.json else table(r))
    if args.write:
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results["testing_cost"] = r
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")  # as bench/run.py writes it
        print(f"wrote the key testing_cost of {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
