"""The spread across arithmetic profiles: ``python tools/measure_frameworks.py --spread``
(`make frameworks-spread`) writes spread.json next to the stored measurements.

The stored files hold what one machine computed (its CPU flags: cpu_flags). Another CPU, or
the same one with a framework's dispatch capped, runs other SIMD kernels, and some outputs move.
--spread measures by how much: the grid once per profile (an environment that caps a
framework's instruction set, a thread count, numpy's SIMD level), each in a fresh process, and
stores per result row the outputs seen (a digest prefix and their counts: correct, nan, inf,
beyond_bound), which profile gave which, and the spread of each count (max - min over the
profiles, the stored measurement included). tests/book/test_frameworks_measured.py derives its
tolerance from it.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from lneps.book import frameworks as FW

from framework_runs import (REFERENCE_OF, ROOT, RUNNERS, STORED, cpu_info, lneps_reference_info, np_dtype,
                            reference, run_grid, unsupported_list)

# Each profile's run is this tool's command line in a process of its own (--spread-worker).
CLI = Path(__file__).resolve().with_name("measure_frameworks.py")


SPREAD_FILE = "spread.json"
SPREAD_SCHEMA = 1
DIGEST_CHARS = 16  # a prefix of an output's SHA-256 (FW.output_digest) names it in spread.json
SPREAD_COUNTS = ("correct", "nan", "inf", "beyond_bound")
# Variables that choose a framework's or numpy's arithmetic; a profile's process starts with
# none of them set, then sets its own.
PROFILE_VARS = ("ATEN_CPU_CAPABILITY", "XLA_FLAGS", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES",
                "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SPREAD_COMMAND = "python tools/measure_frameworks.py --spread   (make frameworks-spread)"


def _cpu_flag_set() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and ":" in line:
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def portable_env(name: str) -> dict:
    """The environment of `make portable`'s profile ``name`` (tools/portable.py), under which
    the whole test suite, this tool's re-measurement included, runs in CI."""
    spec = importlib.util.spec_from_file_location("lneps_portable", ROOT / "tools" / "portable.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.PROFILES[name][0])


def spread_profiles(name: str, flags: set[str] | None = None) -> list[dict]:
    """The profiles --spread runs ``name`` under on a CPU with ``flags`` (default: this one's):
    ``env`` (added to an environment without PROFILE_VARS), ``cpus`` (the process's CPU
    affinity) and ``threads`` (the runner's intra-op threads, for those that take them): each
    runner's own :meth:`framework_runs.Runner.profiles`, only levels the CPU has."""
    have = _cpu_flag_set() if flags is None else set(flags)
    if name not in RUNNERS:
        raise ValueError(f"name must be one of {list(RUNNERS)}; got {name!r}")

    def profile(label, env=None, cpus=2, threads=1):
        return {"name": label, "env": env or {}, "cpus": cpus, "threads": threads}

    return RUNNERS[name].profiles(have, profile, portable_env)


def _profile_environ(profile: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PROFILE_VARS}
    return env | profile["env"]


def spread_worker(name: str, out: Path, threads: int, cpus: int) -> None:
    """One profile's run (a process of its own, started by :func:`measure_spread`): the grid's
    outputs, no reference, into ``out``.npz (one array per result row) and ``out``.json."""
    avail = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, avail[:cpus])  # before any framework starts its thread pools
    t0 = time.perf_counter()
    runner = RUNNERS[name].make(threads)
    unsupported, rows, arrays, inputs = {}, [], {}, {}
    for op, dtype, d, eps, fams, bounds, x, y in run_grid(runner, unsupported):
        inputs.setdefault(f"{dtype} | {d}", FW.output_digest(x))
        for k, family in enumerate(fams):
            ys = y[bounds[k]:bounds[k + 1]]
            arrays[f"r{len(rows)}"] = ys.view(np.uint16) if ys.dtype.itemsize == 2 else ys
            rows.append([op, dtype, family, d, eps, FW.output_digest(ys)])
    np.savez(out.with_suffix(".npz"), **arrays)
    from numpy._core._multiarray_umath import __cpu_features__ as npf

    effective = {"cpus": len(os.sched_getaffinity(0)),
                 "numpy_simd": next((k for k in ("X86_V4", "X86_V3") if npf.get(k)), "X86_V2")}
    effective |= runner.effective()
    out.with_suffix(".json").write_text(json.dumps({
        "rows": rows, "unsupported": unsupported_list(unsupported), "inputs": inputs,
        "versions": runner.versions(), "effective": effective,
        "seconds": round(time.perf_counter() - t0, 1)}))


def _run_profile(name: str, profile: dict, tmp: Path) -> tuple[dict, Any]:
    out = tmp / f"{name}-{len(list(tmp.iterdir()))}"
    cmd = [sys.executable, str(CLI), "--spread-worker", name, "--worker-out", str(out),
           "--threads", str(profile["threads"]), "--cpus", str(profile["cpus"])]
    run = subprocess.run(cmd, env=_profile_environ(profile), cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"spread: {name} under {profile['name']} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return json.loads(out.with_suffix(".json").read_text()), np.load(out.with_suffix(".npz"))


def _row_key(r) -> tuple:
    return (r["op"], r["dtype"], r["family"], r["d"], r["eps"])


class ReferenceBlocks:
    """The grid's inputs and lneps's reference per block (dtype, d, eps and the reference's
    kind), computed once, on first use, for every profile and framework: the correctly rounded
    reference is the slow part of a measurement. :meth:`summary` gives a row's counts."""

    def __init__(self):
        self.inputs, self.refs = {}, {}

    def input(self, dtype, d):
        if (dtype, d) not in self.inputs:
            fams = FW.measurement_rows(dtype, d)
            x = np.concatenate(list(fams.values()))
            b = np.cumsum([0] + [len(v) for v in fams.values()])
            self.inputs[dtype, d] = (x, {f: slice(b[k], b[k + 1]) for k, f in enumerate(fams)})
        return self.inputs[dtype, d]

    def summary(self, op, dtype, family, d, eps, y) -> dict:
        x, slices = self.input(dtype, d)
        kind = REFERENCE_OF[op]
        if (kind, dtype, d, eps) not in self.refs:
            self.refs[kind, dtype, d, eps] = reference(kind, x, eps)
        sl = slices[family]
        s = FW.error_summary(y, self.refs[kind, dtype, d, eps][sl], dtype, x=x[sl], op=kind, eps=eps)
        return {c: s[c] for c in SPREAD_COUNTS if c in s}


def spread_framework(name: str, blocks: ReferenceBlocks, tmp: Path, previous: dict | None = None,
                     log=print) -> dict:
    """One framework's section of spread.json: the stored measurement, then every profile of
    :func:`spread_profiles` on this machine, then the profiles ``previous`` (the section of the
    file being replaced) holds from other machines, if made with the same versions: a run on a
    second machine adds to the spread rather than replacing the first one's."""
    stored = FW.load(name, STORED)
    rows = {_row_key(r): {"op": r["op"], "dtype": r["dtype"], "family": r["family"], "d": r["d"], "eps": r["eps"],
                          "n": r["n"], "outputs": [], "by_profile": []} for r in stored["results"]}
    fields = {k: [c for c in SPREAD_COUNTS if c in r] for k, r in zip(rows, stored["results"])}

    def add(k, digest, counts):
        row = rows[k]
        entry = {"sha256": digest[:DIGEST_CHARS], **counts}
        if entry not in row["outputs"]:
            row["outputs"].append(entry)
        row["by_profile"].append(row["outputs"].index(entry))

    profiles = [{"name": "stored", "source": f"src/lneps/book/data/frameworks/{name}.json", "date": stored["date"],
                 "cpu": stored["platform"]["cpu"], "cpu_flags": stored["cpu_flags"], "env": {},
                 "effective": {k: v for k, v in stored["versions"].items() if k == "cpu_capability"},
                 "unsupported": [[u["op"], u["dtype"], u["error"]] for u in stored["unsupported"]]}]
    for r in stored["results"]:
        add(_row_key(r), r["sha256"], {c: r[c] for c in fields[_row_key(r)]})
    stored_unsupported = {(u["op"], u["dtype"]) for u in stored["unsupported"]}
    computed, moved, versions = {}, [], None
    model, flags = cpu_info()
    for prof in spread_profiles(name):
        t0 = time.perf_counter()
        meta, arrays = _run_profile(name, prof, tmp)
        unsupported = {(u["op"], u["dtype"]) for u in meta["unsupported"]}
        if not stored_unsupported <= unsupported:
            raise SystemExit(f"spread: {name} under {prof['name']}: unsupported {meta['unsupported']}, "
                             f"stored {sorted(stored_unsupported)}")
        if unsupported != stored_unsupported:  # a profile that fails where the stored run did not
            log(f"  {name} | {prof['name']}: fails on {meta['unsupported']}", flush=True)
        for key, digest in meta["inputs"].items():
            dtype, d = key.split(" | ")
            if FW.output_digest(blocks.input(dtype, int(d))[0]) != digest:
                raise SystemExit(f"spread: {name} under {prof['name']}: the inputs {key} differ from this process's")
        v = {k: x for k, x in meta["versions"].items() if k != "cpu_capability"}
        if versions is not None and v != versions:
            raise SystemExit(f"spread: {name}: versions differ between profiles: {v} != {versions}")
        versions = v
        fresh = 0
        for i, (op, dtype, family, d, eps, digest) in enumerate(meta["rows"]):
            k = (op, dtype, family, d, eps)
            if (k, digest) not in computed:
                y = arrays[f"r{i}"]
                y = y.view(np_dtype(dtype)) if y.dtype == np.uint16 else y
                computed[k, digest] = blocks.summary(op, dtype, family, d, eps, y)
                fresh += 1
            add(k, digest, {c: computed[k, digest][c] for c in fields[k]})
        for k, r in rows.items():  # a row of a pair the profile fails on has no output: null
            if len(r["by_profile"]) == len(profiles) and (k[0], k[1]) in unsupported:
                r["by_profile"].append(None)
        missing = [k for k, r in rows.items() if len(r["by_profile"]) != len(profiles) + 1]
        if missing:
            raise SystemExit(f"spread: {name} under {prof['name']}: {len(missing)} stored rows not measured,"
                             f" e.g. {missing[0]}")
        arrays.close()
        profiles.append({"name": prof["name"], "cpu": model, "cpu_flags": flags, "env": prof["env"],
                         "cpus": prof["cpus"], "threads": prof["threads"], "effective": meta["effective"],
                         "unsupported": [[u["op"], u["dtype"], u["error"]] for u in meta["unsupported"]],
                         "seconds": round(time.perf_counter() - t0, 1)})
        log(f"  {name} | {prof['name']}: {meta['effective']}, {fresh} outputs new, "
            f"{round(time.perf_counter() - t0, 1)} s", flush=True)
    carry_over(name, previous, rows, profiles, computed, versions, (model, flags), add, fields, log)
    for r in stored["results"]:  # the stored output met again: were its counts made against this reference?
        k = _row_key(r)
        c = computed.get((k, r["sha256"]))
        if c is not None and any(c[f] != r[f] for f in fields[k]):
            moved.append({"row": list(k), "stored": {f: r[f] for f in fields[k]}, "here": {f: c[f] for f in fields[k]}})
    for r in rows.values():
        r["spread"] = {c: max(o[c] for o in r["outputs"]) - min(o[c] for o in r["outputs"])
                       for c in SPREAD_COUNTS if c in r["outputs"][0]}
    out_rows = list(rows.values())
    return {"versions": versions, "profiles": profiles,
            "rows_with_outputs_differing": sum(len(r["outputs"]) > 1 for r in out_rows),
            "worst": spread_worst(out_rows), "reference_moved": moved, "rows": out_rows}


def carry_over(name, previous, rows, profiles, computed, versions, here, add, fields, log) -> None:
    """Append to ``profiles`` (and every row) the profiles of ``previous`` measured on another
    machine, unless the versions differ or an output met here too carries other counts there
    (the reference moved in between: those counts are stale)."""
    if not previous:
        return
    others = [i for i, p in enumerate(previous["profiles"]) if i > 0 and [p["cpu"], list(p["cpu_flags"])] != list(here)]
    if not others:
        return
    prev_rows = {_row_key(r): r for r in previous["rows"]}
    if previous["versions"] != versions or set(prev_rows) != set(rows):
        log(f"  {name}: not keeping {len(others)} profiles of other machines (other versions or grid)")
        return
    here_counts = {(k, dg[:DIGEST_CHARS]): c for (k, dg), c in computed.items()}
    for k, pr in prev_rows.items():
        for i in others:
            j = pr["by_profile"][i]
            mine = None if j is None else here_counts.get((k, pr["outputs"][j]["sha256"]))
            if mine is not None and any(mine[c] != pr["outputs"][j][c] for c in mine):
                log(f"  {name}: not keeping the profiles of other machines: {k} has other counts there")
                return
    for i in others:
        profiles.append(previous["profiles"][i])
        for k, pr in prev_rows.items():
            j = pr["by_profile"][i]
            if j is None:
                rows[k]["by_profile"].append(None)
            else:
                o = pr["outputs"][j]
                add(k, o["sha256"], {c: o[c] for c in fields[k]})
    cpus = sorted({previous["profiles"][i]["cpu"] for i in others})
    log(f"  {name}: kept {len(others)} profiles of other machines: {cpus}")


def spread_worst(rows: list[dict]) -> dict:
    """Per count: the largest spread (as a count and as a share of the row's n), its row, and
    how many rows have a spread at all."""
    out = {}
    for c in SPREAD_COUNTS:
        have = [r for r in rows if c in r["spread"]]
        if not have:
            continue
        w = max(have, key=lambda r: (r["spread"][c] / r["n"], r["spread"][c]))
        out[c] = {"rows_moved": sum(r["spread"][c] > 0 for r in have), "rows": len(have),
                  "max": max(r["spread"][c] for r in have), "max_share": w["spread"][c] / w["n"],
                  "at": [w["op"], w["dtype"], w["family"], w["d"], w["eps"]] if w["spread"][c] else None}
    return out


def isa_class(profile: dict) -> str:
    """The instruction-set class a profile ran: what --spread's leave-one-out holds out together
    (thread counts and numpy's level do not change the frameworks' kernels)."""
    eff, env = profile.get("effective", {}), profile.get("env", {})
    if "cpu_capability" in eff:
        return eff["cpu_capability"]
    if "xla_cpu_max_isa" in env.get("XLA_FLAGS", ""):
        return env["XLA_FLAGS"].split("=")[-1]
    flags = set(profile.get("cpu_flags", []))
    return next((isa for isa, need in (("AVX512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"))
                 if need in flags), "SSE4_2")


def held_out(section: dict, safety: float) -> dict:
    """Leave-one-out over instruction-set classes: for each class, judge its outputs that no
    other class produced by rule 3 of tests/book/test_frameworks_measured.py with the spread of the
    other classes only, anchored on the stored output (on a native one when the stored class is
    the one held out). Returns class -> (rows beyond the tolerance, rows judged)."""
    classes = [isa_class(p) for p in section["profiles"]]
    out = {}
    for g in dict.fromkeys(classes):
        beyond = judged = 0
        anchor = 0 if classes[0] != g else next((i for i, c in enumerate(classes) if c != g), None)
        if anchor is None:
            continue
        for r in section["rows"]:
            kept = [r["outputs"][j] for j, c in zip(r["by_profile"], classes) if c != g and j is not None]
            if r["by_profile"][anchor] is None:
                continue
            a = r["outputs"][r["by_profile"][anchor]]
            seen = {o["sha256"] for o in kept}
            for j in {j for j, c in zip(r["by_profile"], classes) if c == g and j is not None}:
                o = r["outputs"][j]
                if o["sha256"] in seen:
                    continue
                judged += 1
                spread = {c: max(k[c] for k in kept) - min(k[c] for k in kept) for c in r["spread"]}
                beyond += any(abs(o[c] - a[c]) > safety * spread[c] for c in spread)
        out[g] = (beyond, judged)
    return out


def load_spread(path=None) -> dict:
    """spread.json (default: this checkout's), checked by :func:`validate_spread`."""
    data = json.loads(Path(path or STORED / SPREAD_FILE).read_text(encoding="utf-8"))
    validate_spread(data)
    return data


def validate_spread(data: dict) -> None:
    """Raise ValueError naming what breaks spread.json's structure."""
    if data.get("schema") != SPREAD_SCHEMA:
        raise ValueError(f"spread.json: schema {data.get('schema')!r}, expected {SPREAD_SCHEMA}")
    for key in ("command", "date", "machine", "reference", "frameworks"):
        if key not in data:
            raise ValueError(f"spread.json lacks {key}")
    for fw, sec in data["frameworks"].items():
        np_ = len(sec["profiles"])
        if sec["profiles"][0]["name"] != "stored":
            raise ValueError(f"spread.json {fw}: the first profile must be the stored measurement")
        for i, r in enumerate(sec["rows"]):
            where = f"spread.json {fw} rows[{i}]"
            given = [j for j in r["by_profile"] if j is not None]  # null: the profile fails on the pair
            if len(r["by_profile"]) != np_ or not all(0 <= j < len(r["outputs"]) for j in given):
                raise ValueError(f"{where}: by_profile must index outputs, one entry per profile")
            if r["by_profile"][0] is None or sorted(set(given)) != list(range(len(r["outputs"]))):
                raise ValueError(f"{where}: an output no profile gave")
            for c, s in r["spread"].items():
                vals = [o[c] for o in r["outputs"]]
                if s != max(vals) - min(vals) or not all(0 <= v <= r["n"] for v in vals):
                    raise ValueError(f"{where}: spread of {c} is not max - min of its outputs")


def dump_spread(data: dict, path: Path) -> None:
    """Strict JSON, one profile and one result row a line (so a re-measurement's diff shows the
    rows that moved)."""
    validate_spread(data)
    lists = {(fw, part): sec[part] for fw, sec in data["frameworks"].items() for part in ("profiles", "rows")}
    shell = {**data, "frameworks": {fw: {**sec, "profiles": f"@@{fw} profiles@@", "rows": f"@@{fw} rows@@"}
                                    for fw, sec in data["frameworks"].items()}}
    text = json.dumps(shell, indent=1, allow_nan=False)
    for (fw, part), items in lists.items():
        body = "[\n" + ",\n".join("    " + json.dumps(r, allow_nan=False) for r in items) + "\n   ]"
        text = text.replace(json.dumps(f"@@{fw} {part}@@"), body)
    Path(path).write_text(text + "\n", encoding="utf-8")


def measure_spread(names, out_dir: Path) -> dict:
    """Re-make spread.json for ``names`` (other frameworks' sections are kept from the file)."""
    import tempfile

    path = out_dir / SPREAD_FILE
    old = load_spread(path) if path.is_file() else None
    model, flags = cpu_info()
    data = {
        "schema": SPREAD_SCHEMA,
        "what": "Per result row of the stored measurements (op, dtype, family, d, eps): the outputs each "
                "profile computed (sha256: the first 16 hex digits of the output's SHA-256) with their counts "
                "(correct, nan, inf, beyond_bound, as in the stored files), by_profile[i] the output of "
                "profiles[i] (profiles[0]: the stored measurement; null where that profile fails on the "
                "op and dtype, its unsupported), spread = max - min of each count over the profiles. "
                "tests/book/test_frameworks_measured.py derives its tolerance from it.",
        "command": SPREAD_COMMAND,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"system": platform.system(), "machine": platform.machine(), "cpu": model,
                    "cpu_flags": flags, "cores": os.cpu_count()},
        "versions": {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__, "python": platform.python_version()},
        "reference": lneps_reference_info(),
        "profile_vars": list(PROFILE_VARS),
        "frameworks": dict(old["frameworks"]) if old else {},
    }
    blocks = ReferenceBlocks()
    with tempfile.TemporaryDirectory(prefix="lneps-spread-") as tmp:
        for name in names:
            t0 = time.perf_counter()
            print(f"{name}: {len(spread_profiles(name))} profiles", flush=True)
            sec = spread_framework(name, blocks, Path(tmp), previous=(old or {}).get("frameworks", {}).get(name))
            sec["seconds"] = round(time.perf_counter() - t0, 1)
            data["frameworks"][name] = sec
            for f in Path(tmp).iterdir():
                f.unlink()
            # written after each framework, in FRAMEWORKS order, so that an interrupted run keeps its work
            data["frameworks"] = {fw: data["frameworks"][fw] for fw in FW.FRAMEWORKS if fw in data["frameworks"]}
            dump_spread(data, path)
    return data


def spread_report(data: dict, names) -> str:
    lines = []
    for fw in names:
        sec = data["frameworks"][fw]
        lines.append(f"{fw}: {len(sec['profiles'])} profiles (stored + {len(sec['profiles']) - 1} here), "
                     f"{sec['rows_with_outputs_differing']} of {len(sec['rows'])} rows with outputs differing")
        for c, w in sec["worst"].items():
            if w["at"] is None:
                lines.append(f"  {c}: the same in every profile, all {w['rows']} rows")
                continue
            op, dtype, family, d, eps = w["at"]
            lines.append(f"  {c}: spread > 0 in {w['rows_moved']} of {w['rows']} rows; worst {w['max_share']:.2%} "
                         f"at {op} {dtype} {family} d={d} eps={eps:g}; largest count {w['max']}")
        for safety in (1, 2, 3):
            ho = {g: f"{b} of {n}" for g, (b, n) in held_out(sec, safety).items() if n}
            if ho:
                lines.append(f"  left out, judged by the others' spread x {safety}: rows beyond {ho}")
        if sec["reference_moved"]:
            lines.append(f"  {len(sec['reference_moved'])} stored outputs met again with other counts: "
                         "the lneps reference moved since the stored measurement")
    return "\n".join(lines)


