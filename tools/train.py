"""Re-make the training lab's stored runs (`make training`) or its machine spread
(`make training-spread`): src/lneps/book/data/training/.

    python tools/train.py                    # the whole grid: corpus, runs.json, runs.npz
    python tools/train.py --slice precision  # one slice, merged into the stored runs
    python tools/train.py --slice lr --missing  # only its runs not stored yet
    python tools/train.py --slice scale --missing --match L8 --max-runs 20  # a part of them
    python tools/train.py --spread           # the spread across arithmetic profiles
    python tools/train.py --probe            # q/eps at initialization: probe.json
    python tools/train.py --out /tmp/lab     # write elsewhere

The grid runs WORKERS (2) processes of one thread each (`OMP_NUM_THREADS=1`,
`torch.set_num_threads(1)`, `torch.use_deterministic_algorithms(True)`), each run seeded; every
worker reports its provenance (lneps.book.training.provenance), and all must agree. The spread
runs lneps.book.training.grid.SPREAD_CONFIGS once per profile of
lneps.book.training.spread.PROFILES, each profile in a subprocess of its own with its
environment (ATEN_CPU_CAPABILITY) and thread count, and compares them with the stored runs.
Needs torch (the frameworks extra). On another machine, re-make the spread after the grid: the spread
is compared with the stored runs (its native, one-thread profile must be the grid's runs, bit for bit).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from lneps.book.training import corpus as C  # noqa: E402
from lneps.book.training import grid as G  # noqa: E402
from lneps.book.training import spread as S  # noqa: E402
from lneps.book.training.config import from_dict, run_id  # noqa: E402
from lneps.book.training.recipe import EVAL_EVERY, FINETUNE, RECIPE  # noqa: E402
from lneps.book.training.record import EVERY, FULL_STEPS, QUANTILES, STATS, THRESHOLDS  # noqa: E402

STORED = ROOT / "src" / "lneps" / "book" / "data" / "training"
WORKERS = 2


# --- in the worker processes ---


def _init_worker(threads: int):
    from lneps.book.training import run

    run.configure(threads)


def _job(job_dicts: list[dict], stream: np.ndarray):
    from lneps.book.training import run
    from lneps.book.training.provenance import provenance

    t0, c0 = time.perf_counter(), time.process_time()
    out = run.run_job([from_dict(d) for d in job_dicts], stream)
    return out, provenance(), time.perf_counter() - t0, time.process_time() - c0


def _extras():
    """The autocast measurement and the zero-row probe (seeds of the grid)."""
    from lneps.book.training import precision, run
    from lneps.book.training.provenance import provenance

    probes = [run.zero_row_probe(s, p, e) for p, e in run.PROBE_CASES for s in G.SEEDS]
    return {"autocast": precision.measure_autocast(), "zero_row_probe": probes}, provenance()


# --- storing ---


def _cost(job) -> float:
    """A rough cost to schedule the longest jobs first (low precision is 5-7x float32 here)."""
    factor = {
        "fp32": 1,
        "bf16_norm32": 5,
        "bf16_norm16": 5,
        "fp16_norm32": 7,
        "fp16_eps16": 7,
        "fp16_var16": 2,
        "fp16_pure": 0.1,
    }
    return sum(
        c.steps * factor[c.precision] + c.ft_steps * factor.get(c.ft_precision or "fp32", 1)
        for c in job
    )


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def write_corpus(out: Path) -> np.ndarray:
    stream = C.generate()
    old = out / "corpus.npy"
    if old.exists() and C.digest(np.load(old)) != C.digest(stream):
        print("corpus: the generator no longer reproduces the stored stream", file=sys.stderr)
    np.save(out / "corpus.npy", stream)
    meta = {
        **C.describe(C.CHAIN, context=64),
        "sha256": C.digest(stream),
        "file": "corpus.npy",
        "dtype": "uint8",
        "numpy": np.__version__,
        "generator": "lneps.book.training.corpus.generate(lneps.book.training.corpus.CHAIN)",
    }
    (out / "corpus.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return stream


def _record_entry(cfg, rec: dict, job_index: int) -> dict:
    keep = (
        "first_nonfinite_step",
        "first_nonfinite_param_step",
        "stopped_at",
        "nonfinite_steps",
        "eps_used",
        "seconds",
        "cpu_seconds",
        "eval_before_swap",
    )
    return {
        "config": cfg.as_dict(),
        "sites": list(rec["sites"]),
        "job": job_index,
        **{k: _jsonable(rec[k]) for k in keep if k in rec},
    }


def _arrays_of(rid: str, rec: dict) -> dict:
    a = {
        f"{rid}:loss": rec["loss"].astype(np.float32),
        f"{rid}:grad_norm": rec["grad_norm"].astype(np.float32),
        f"{rid}:eval_loss": rec["eval_loss"].astype(np.float64),
        f"{rid}:q": rec["q"].astype(np.float32),
    }
    if "scale" in rec:
        a[f"{rid}:scale"] = rec["scale"].astype(np.float32)
    return a


def run_grid(configs, workers: int, threads: int = 1, with_extras: bool = True):
    """Train every configuration in ``workers`` processes; returns (records, provenances, extras,
    timing). ``with_extras``: also the autocast measurement and the zero-row probe (else None)."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    stream = C.generate()
    jobs = sorted(G.jobs(list(configs)), key=_cost, reverse=True)
    ctx = mp.get_context("spawn")
    load0 = list(os.getloadavg())
    t0 = time.perf_counter()
    records, provs, cpu, done = {}, [], 0.0, 0
    with cf.ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_init_worker, initargs=(threads,)
    ) as ex:
        extra_f = ex.submit(_extras) if with_extras else None
        futs = {
            ex.submit(_job, [c.as_dict() for c in job], stream): (i, job)
            for i, job in enumerate(jobs)
        }
        for f in cf.as_completed(futs):
            i, job = futs[f]
            out, prov, wall, c = f.result()
            provs.append(prov)
            cpu += c
            done += 1
            for c_ in job:
                rid = run_id(c_)
                if rid in out:
                    records[rid] = (c_, out[rid], i)
            print(
                f"[{done}/{len(jobs)}] {time.perf_counter() - t0:7.1f}s  {run_id(job[0])} (+{len(job) - 1}) "
                f"{wall:.1f}s",
                flush=True,
            )
        extras = None
        if extra_f is not None:
            extras, prov = extra_f.result()
            provs.append(prov)
    timing = {
        "wall_seconds": time.perf_counter() - t0,
        "worker_cpu_seconds": cpu,
        "workers": workers,
        "load_average_at_end": list(os.getloadavg()),
        "load_average_at_start": load0,
        "threads_per_worker": threads,
        "jobs": len(jobs),
        "runs": len(records),
    }
    return records, provs, extras, timing


def _provenance_one(provs: list[dict]) -> dict:
    from lneps.book.training.provenance import arithmetic_key

    keys = {arithmetic_key(p) for p in provs}
    if len(keys) != 1:
        raise SystemExit(f"workers disagree on their arithmetic: {keys}")
    p = dict(provs[0])
    p["command"] = " ".join(["python", *sys.argv]) if sys.argv else p["command"]
    return p


def store(out: Path, records: dict, prov: dict, extras: dict, timing: dict, merge: bool):
    manifest_path, arrays_path = out / "runs.json", out / "runs.npz"
    runs, arrays = {}, {}
    if merge and manifest_path.exists():
        from lneps.book.training.provenance import arithmetic_key

        old = json.loads(manifest_path.read_text(encoding="utf-8"))
        # runs made on another machine (or arithmetic) are stored with its provenance: each run
        # names its machine (an index into "machines", 0 the whole grid's), and a comparison
        # paired by seed pairs runs of one machine
        machines = old.get("machines", [old["provenance"]])
        keys = [arithmetic_key(m) for m in machines]
        if arithmetic_key(prov) not in keys:
            machines.append(prov)
            keys.append(arithmetic_key(prov))
        machine = keys.index(arithmetic_key(prov))
        runs = old["runs"]
        if extras is None:
            extras = {k: old[k] for k in ("autocast", "zero_row_probe")}
        # the whole grid's timing stays; each slice's is kept beside it, by its command
        cmd = " ".join(["python", *sys.argv])
        slices = {**old["timing"].get("slices", {}), cmd: {**timing, "provenance": prov}}
        prov = old["provenance"]  # the whole grid's; each slice's sits beside its timing
        timing = {
            **{k: v for k, v in old["timing"].items() if k not in ("slices", "last_slice")},
            "slices": slices,
        }
        with np.load(arrays_path) as z:
            arrays = {k: z[k] for k in z.files}
    else:
        machines, machine = [prov], 0
    for rid, (cfg, rec, job) in sorted(records.items()):
        runs[rid] = {**_record_entry(cfg, rec, job), "machine": machine}
        arrays = {k: v for k, v in arrays.items() if not k.startswith(rid + ":")}
        arrays.update(_arrays_of(rid, rec))
    wanted = {run_id(c) for c in G.all_configs()}
    if set(runs) != wanted:
        print(
            f"note: stored runs differ from the grid: missing {sorted(wanted - set(runs))[:5]}..., "
            f"extra {sorted(set(runs) - wanted)[:5]}",
            file=sys.stderr,
        )
    manifest = {
        "about": "lneps training lab: stored runs (lneps.book.training); made by tools/train.py (make training)",
        "provenance": prov,
        "machines": machines,
        "timing": timing,
        "corpus": json.loads((out / "corpus.json").read_text(encoding="utf-8")),
        "recipe": RECIPE,
        "finetune": FINETUNE,
        "eval_every": EVAL_EVERY,
        "record": {
            "stats": list(STATS),
            "quantiles": list(QUANTILES),
            "thresholds": THRESHOLDS,
            "full_steps": FULL_STEPS,
            "every": EVERY,
            "note": "q statistics at every step for the first full_steps steps, then every `every`-th "
            "step and the last; loss and gradient norm at every step; the held-out loss every "
            "eval_every steps. q is float64 in the run, stored as float32.",
        },
        "slices": G.describe(),
        "seeds": list(G.SEEDS),
        **extras,
        "runs": runs,
    }
    manifest_path.write_text(
        json.dumps(manifest, indent=1, allow_nan=False) + "\n", encoding="utf-8"
    )
    np.savez_compressed(arrays_path, **arrays)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"stored {len(runs)} runs in {out} ({size / 1e6:.2f} MB)")


# --- the spread ---


def _profile_worker(args):
    """In a subprocess with the profile's environment: train SPREAD_CONFIGS, write an npz + json."""
    from lneps.book.training import run
    from lneps.book.training.provenance import provenance

    run.configure(args.threads)
    stream = C.generate()
    out, meta = {}, {}
    for cfg in G.SPREAD_CONFIGS:
        rid = run_id(cfg)
        rec = run.run_job([cfg], stream)[rid]
        out.update(_arrays_of(rid, rec))
        meta[rid] = _record_entry(cfg, rec, 0)
    np.savez_compressed(args.profile_out + ".npz", **out)
    Path(args.profile_out + ".json").write_text(
        json.dumps({"provenance": provenance(), "runs": meta}), encoding="utf-8"
    )


def run_spread(out: Path):
    arrays, profiles = {}, {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, prof in S.PROFILES.items():
            env = {
                **os.environ,
                **prof["env"],
                "OMP_NUM_THREADS": str(prof["threads"]),
                "MKL_NUM_THREADS": str(prof["threads"]),
            }
            for k in S.PROFILE_VARS:
                if k not in prof["env"]:
                    env.pop(k, None)
            dest = str(Path(tmp) / name)
            t1 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--profile-worker",
                    dest,
                    "--threads",
                    str(prof["threads"]),
                ],
                env=env,
                check=True,
            )
            with np.load(dest + ".npz") as z:
                arrays.update({f"{name}/{k}": z[k] for k in z.files})
            profiles[name] = {
                **json.loads(Path(dest + ".json").read_text()),
                "definition": prof,
                "wall_seconds": time.perf_counter() - t1,
            }
            print(f"profile {name}: {time.perf_counter() - t1:.1f}s", flush=True)
    manifest = {
        "about": "lneps training lab: the same runs under several arithmetic profiles (make training-spread)",
        "configs": [run_id(c) for c in G.SPREAD_CONFIGS],
        "profiles": profiles,
        "command": " ".join(["python", *sys.argv]),
        "wall_seconds": time.perf_counter() - t0,
    }
    (out / "spread.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    np.savez_compressed(out / "spread.npz", **arrays)
    print(
        f"spread: {len(profiles)} profiles x {len(G.SPREAD_CONFIGS)} runs in {time.perf_counter() - t0:.0f}s"
    )


# --- q at initialization (lneps.torch's probe) ---

#: The lab's models the probe measures at initialization (seeds 0-2, each on its first batch).
PROBE_MODELS = [
    dict(norm=n, placement=p, init=i)
    for n in ("LayerNorm", "RMSNorm")
    for p in ("pre", "post", "sandwich")
    for i in ("normal", "small", "zero_resid")
]
PROBE_MODELS += [dict(init=i, layers=8) for i in ("normal", "small")]
PROBE_MODELS += [dict(init=i, layers=4, width=128) for i in ("normal", "small")]


def _site_rows(sites) -> dict:
    return {
        name: {k: v for k, v in s.as_dict().items() if k != "name"} for name, s in sites.items()
    }


def run_probe(out: Path, sentences: int = 32):
    """lneps.torch.probe on the lab's models at initialization (eps 1e-5) and on all-MiniLM-L6-v2
    as a PyTorch module (lneps.book.minilm.torch_model: the packaged weights, its 13
    nn.LayerNorm(eps=1e-12); the book's first ``sentences`` sentences, packed, float32, one
    thread): probe.json."""
    from lneps.book.training import run
    from lneps.book.training.config import RunConfig
    from lneps.book.training.provenance import provenance
    from lneps.book.training.recipe import batch_offsets
    from lneps.torch import probe
    import torch

    run.configure(1)
    stream = torch.as_tensor(C.generate().astype(np.int64))
    lab = []
    for m in PROBE_MODELS:
        cfg = RunConfig(eps=1e-5, **m)
        for seed in G.SEEDS[:3]:
            model = run.build(run.spec_of(cfg), seed)
            starts = batch_offsets(seed, 1, RECIPE["batch"], model.spec.context, len(stream))[0]
            x, _ = run.windows(stream, starts, model.spec.context)
            lab.append({
                "config": {k: v for k, v in cfg.as_dict().items() if v is not None},
                "seed": seed,
                "sites": _site_rows(probe(model, x)),
            })
    minilm = _probe_minilm(sentences)
    doc = {
        "about": "q/eps at every norm: lneps.torch.probe on the lab's models at initialization "
        "and on all-MiniLM-L6-v2 as a PyTorch module (tools/train.py --probe)",
        "provenance": provenance(),
        "lab": lab,
        "minilm": minilm,
    }
    (out / "probe.json").write_text(
        json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8"
    )
    print(f"probe: {len(lab)} lab models, MiniLM's {len(minilm['sites'])} sites -> {out / 'probe.json'}")


def _probe_minilm(sentences: int) -> dict:
    """lneps.torch.probe on all-MiniLM-L6-v2 built as a PyTorch module from the packaged weights,
    over the book's first ``sentences`` sentences (run.configure has fixed the threads)."""
    import torch

    from lneps.book.minilm import files, torch_model
    from lneps.torch import probe

    model = files.load()
    text = (ROOT / "book" / "data" / "sentences.txt").read_text(encoding="utf-8").splitlines()
    ids, lengths = torch_model.pack(files.encode(model, text[:sentences]))
    sites = probe(torch_model.build(model), ids, lengths)
    return {
        "model": "all-MiniLM-L6-v2",
        "route": "lneps.torch.probe on lneps.book.minilm.torch_model.build(load()), float32",
        "sentences": sentences,
        "tokens": int(lengths.sum()),
        "eps": model.eps,
        "sha256": files.model_sha256(model.directory),
        "torch_threads": torch.get_num_threads(),
        "sites": _site_rows(sites),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=STORED)
    ap.add_argument("--slice", choices=list(G.SLICES), action="append")
    ap.add_argument("--workers", type=int, default=WORKERS)
    ap.add_argument(
        "--missing",
        action="store_true",
        help="only the configurations not stored yet (to extend a slice's seeds)",
    )
    ap.add_argument("--match", help="only the runs whose id matches this regular expression")
    ap.add_argument("--max-runs", type=int, help="at most this many runs (stored when done)")
    ap.add_argument("--spread", action="store_true")
    ap.add_argument("--probe", action="store_true", help="q/eps at initialization (probe.json)")
    ap.add_argument("--profile-worker", dest="profile_out", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.profile_out:
        return _profile_worker(args)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.spread:
        return run_spread(args.out)
    if args.probe:
        return run_probe(args.out)
    write_corpus(args.out)
    configs = [c for s in args.slice for c in G.configs(s)] if args.slice else G.all_configs()
    if args.missing and (args.out / "runs.json").exists():
        have = set(json.loads((args.out / "runs.json").read_text(encoding="utf-8"))["runs"])
        configs = [c for c in configs if run_id(c) not in have]
    if args.match:
        import re

        configs = [c for c in configs if re.search(args.match, run_id(c))]
    if args.max_runs:
        configs = configs[: args.max_runs]
    if not configs:
        # nothing to train: bring the manifest's description of the grid up to date
        path = args.out / "runs.json"
        m = json.loads(path.read_text(encoding="utf-8"))
        m.update(slices=G.describe(), seeds=list(G.SEEDS))
        path.write_text(json.dumps(m, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        return print("nothing to run: every configuration is stored (the slices re-described)")
    records, provs, extras, timing = run_grid(configs, args.workers, with_extras=not args.slice)
    store(args.out, records, _provenance_one(provs), extras, timing, merge=bool(args.slice))


if __name__ == "__main__":
    main()
