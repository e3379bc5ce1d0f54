"""Scale-out of the one-pass VFF statistics over Dask worker processes, against the in-process pass.

The statistics of the collapsed bound are sums over rows (A = Σ φ_n φ_nᵀ, c, f₁, yᵀy, Σy, N), so they
split over partitions and add up [1, §5.2]: ``fourier_statistics`` on a Dask collection computes each
partition's sums on the worker that reads it and adds them in a tree there; the driver receives one
(M² + 2M + 3)-vector. Here, on the airline-size synthetic set of ``vff_scaling`` (3,952,942 training
rows, 8 inputs, ``models.airline.synthetic`` and ``prepare``; ``--quick``: 10⁵), with its features
(additive Matérn-3/2 box features, 30 frequencies per input: M = 472) and ``method="nufft"``:

1. **in-process**: ``fourier_statistics`` on the in-memory arrays (all cores: FINUFFT threads = cores);
2. **Dask, k = 1 and 2 workers**: the training set written as Parquet files of nearly equal length, at
   most ``--partition-rows`` rows each (not timed), then a ``LocalCluster(n_workers=k, processes=True,
   threads_per_worker=1)`` reading them with ``dask.dataframe.read_parquet`` (the reading is part of
   the timed work).

Each configuration runs the whole pass twice: the first run includes compilation (and, on Dask, each
worker's import of JAX and the library), the second is the steady state; ``warm-up`` is their
difference. Reported per row: wall seconds, rows/s per worker (N / wall / k), CPU seconds of the
workers (``client.run(time.process_time)`` before and after; of this process in-process) and rows per
CPU second (the steadier measure on a shared machine), the peak resident memory of each worker (VmHWM,
read in the worker) and of this process (data generation included), the steady wall-time ratio to the
in-process pass, and the max-norm relative difference of A from the in-process A (rounding: the same
terms added in another grouping). The 1-minute load average before and after is stored with every row.

A second part is optional: if ``inference/benchmarks/scale_out_sharded.py`` exists and has
``rows(args)``, its rows (and its ``COLUMNS``, a :func:`harness.table` spec, where it has one) are
printed and stored under ``"sharded"`` in the JSON (``--skip-sharded`` leaves it out).

``python -m inference.benchmarks.scale_out [--quick] [--n-train N] [--workers 1,2] [--partition-rows R]`` writes
``results/scale_out.json`` and prints a Markdown table.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
"""
from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from inference.benchmarks import harness

FULL_TRAIN = 3_952_942  # as vff_scaling: 2/3 of the 5,929,413 airline rows of 2008
SHARDED = "inference.benchmarks.scale_out_sharded"


def _peak_rss_gb():
    """This process's peak resident memory, GB: VmHWM of /proc/self/status (the peak of this process's
    own memory; ``ru_maxrss`` is not: Linux carries it over ``execve``, so a freshly spawned worker
    reports at least its parent's peak), else ``ru_maxrss``."""
    import resource as r

    try:
        with open("/proc/self/status") as fh:
            kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        kb = r.getrusage(r.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return kb / 2**20


def _worker_cpu_s():
    import time as t

    return t.process_time()


def _rel_diff(A, ref):
    import numpy as np

    A, ref = np.asarray(A), np.asarray(ref)
    return float(np.max(np.abs(A - ref)) / np.max(np.abs(ref)))


def make_data(args):
    """The training inputs (in [0, 1]) and standardised target of vff_scaling's set of ``args.n_train`` rows."""
    from models import airline

    X, y, names, _ = airline.synthetic(int(round(args.n_train * 1.5)), seed=args.seed)
    data = airline.prepare(X, y, seed=args.seed)
    return data["X"], data["y"], names, airline.make_feature(len(names), args.num_frequencies)


def write_parquet(X, y, names, folder, rows):
    """⌈N / rows⌉ Parquet files of (nearly) equal length, at most ``rows`` rows each: the covariates
    under their names and the target ``y``. Equal partitions share one compiled chunk shape."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    parts = -(-len(y) // rows)
    bounds = np.linspace(0, len(y), parts + 1).round().astype(int)
    for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        cols = {name: X[start:stop, d] for d, name in enumerate(names)}
        pq.write_table(pa.table({**cols, "y": y[start:stop]}), folder / f"part-{i:04d}.parquet")
    return parts


def in_process(feature, X, y, args):
    import jax

    from ppl_sparsegp.features.fourier_statistics import fourier_statistics

    row = {"config": "in-process", "workers": None, "load_before": os.getloadavg()[0]}
    runs = []
    for _ in range(2):  # cold (compilation) and steady
        with harness.clock() as c:
            stats = jax.block_until_ready(fourier_statistics(feature, X, y, method="nufft", eps=args.eps,
                                                             chunk_size=args.chunk_size))
        runs.append(c)
    row.update(first_s=runs[0].wall, wall_s=runs[1].wall, warmup_s=runs[0].wall - runs[1].wall,
               cpu_s=runs[1].cpu, rows_per_s_per_worker=len(y) / runs[1].wall, peak_rss_gb=_peak_rss_gb(),
               driver_peak_rss_gb=_peak_rss_gb(), load_after=os.getloadavg()[0])
    return row, stats


def on_dask(feature, folder, names, n, k, reference, args):
    import dask.dataframe as dd
    import jax
    import numpy as np
    from distributed import Client, LocalCluster

    from ppl_sparsegp.features.fourier_statistics import fourier_statistics

    row = {"config": "dask", "workers": k, "load_before": os.getloadavg()[0]}
    with harness.clock() as start:
        cluster = LocalCluster(n_workers=k, processes=True, threads_per_worker=1, dashboard_address=None,
                               worker_dashboard_address=None)
        client = Client(cluster)
    row["cluster_start_s"] = start.wall
    try:
        runs, cpu = [], []
        for _ in range(2):  # cold (imports, compilation on each worker) and steady
            before = client.run(_worker_cpu_s)
            with harness.clock() as c:
                df = dd.read_parquet(folder)
                stats = jax.block_until_ready(
                    fourier_statistics(feature, df, "y", columns=names, method="nufft", eps=args.eps,
                                       chunk_size=args.chunk_size))
            after = client.run(_worker_cpu_s)
            runs.append(c)
            cpu.append(sum(after[w] - before[w] for w in after))
        rss = client.run(_peak_rss_gb)
        row.update(partitions=df.npartitions, first_s=runs[0].wall, wall_s=runs[1].wall,
                   warmup_s=runs[0].wall - runs[1].wall, cpu_s=cpu[1], first_cpu_s=cpu[0],
                   rows_per_s_per_worker=n / runs[1].wall / k, peak_rss_gb=max(rss.values()),
                   worker_peak_rss_gb=sorted(rss.values()), driver_peak_rss_gb=_peak_rss_gb(),
                   rel_diff_A=_rel_diff(stats.A, reference.A),
                   rel_diff_c=_rel_diff(stats.c, reference.c),
                   n_equal=bool(float(stats.n) == float(reference.n)),
                   partition_result_mb=(np.size(stats.A) + 2 * np.size(stats.c) + 3) * 8 / 1e6)
    finally:
        client.close()
        cluster.close()
    row["load_after"] = os.getloadavg()[0]
    return row


def sharded_part(args):
    """The optional second part: ``(module, rows)`` from :data:`SHARDED` if it exists and has
    ``rows(args)``, else ``(None, [])``."""
    try:
        module = importlib.import_module(SHARDED)
    except ModuleNotFoundError as e:
        if e.name != SHARDED:
            raise
        return None, []
    if not callable(getattr(module, "rows", None)):
        return None, []
    return module, [dict(r, part="sharded") for r in module.rows(args)]


def _f(v, spec):
    return "—" if v is None else format(v, spec)


COLUMNS = [
    ("config", lambda r: r["config"] if r["workers"] is None else f"Dask, {r['workers']} worker"
     + ("s" if r["workers"] > 1 else ""), ""),
    ("N", "n_train", ","), ("partitions", "partitions", "d"),
    ("wall s (steady)", "wall_s", ".2f"), ("first run s", "first_s", ".2f"), ("warm-up s", "warmup_s", ".2f"),
    ("rows/s per worker", lambda r: r["rows_per_s_per_worker"] / 1e6, lambda v: f"{v:.2f} M"),
    ("CPU s", "cpu_s", ".1f"),
    ("rows per CPU-s", lambda r: r["n_train"] / r["cpu_s"] / 1e6, lambda v: f"{v:.2f} M"),
    ("peak RSS per worker GB", lambda r: r.get("worker_peak_rss_gb") or [r["peak_rss_gb"]],
     lambda v: ", ".join(f"{x:.2f}" for x in v)),
    ("wall / in-process", "wall_ratio", ".2f"),
    ("max rel ΔA", "rel_diff_A", ".1e"),
    ("load 1-min", lambda r: f"{r['load_before']:.1f}→{r['load_after']:.1f}", ""),
]


def main(argv=None):
    p = harness.parser("scale_out", __doc__)
    p.add_argument("--n-train", type=float, default=None,
                   help=f"training rows (default {FULL_TRAIN:,}; --quick 1e5)")
    p.add_argument("--workers", default="1,2", help="Dask worker processes to try (default %(default)s)")
    p.add_argument("--partition-rows", type=int, default=None,
                   help="rows per Parquet file / Dask partition (default 2^18; --quick 2^14)")
    p.add_argument("--num-frequencies", type=int, default=30)
    p.add_argument("--eps", type=float, default=1e-12, help="NUFFT tolerance")
    p.add_argument("--chunk-size", type=int, default=None, help="rows per device per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", type=Path, default=None, help="write the Parquet files here and keep them")
    p.add_argument("--skip-sharded", action="store_true", help=f"leave out the second part ({SHARDED})")
    args = p.parse_args(argv)
    args.n_train = int(args.n_train or (100_000 if args.quick else FULL_TRAIN))
    args.partition_rows = args.partition_rows or (1 << 14 if args.quick else 1 << 18)
    workers = [int(k) for k in args.workers.split(",")]
    machine = harness.setup(args)
    import jax

    store = harness.Store(args.out, ["config", "workers", "n_train"], resume=args.resume, merge=args.merge,
                          settings={k: getattr(args, k) for k in ("num_frequencies", "eps", "chunk_size",
                                                                  "partition_rows", "seed")})
    with harness.clock() as gen:
        X, y, names, feature = make_data(args)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="scale_out-"))
    try:
        with harness.clock() as wr:
            n_files = write_parquet(X, y, names, folder, args.partition_rows)
        print(f"{len(y):,} rows, {feature.num_features} features; data {gen.wall:.1f} s, {n_files} Parquet files "
              f"{wr.wall:.1f} s", flush=True)
        ref_row, reference = in_process(feature, X, y, args)
        ref_row.update(n_train=len(y), partitions=None, wall_ratio=1.0, rel_diff_A=0.0)
        store.add(ref_row)
        del X
        for k in workers:
            if store.done("dask", k, len(y)):
                continue
            row = on_dask(feature, folder, names, len(y), k, reference, args)
            row.update(n_train=len(y), wall_ratio=row["wall_s"] / ref_row["wall_s"])
            store.add(row)
            print(harness.table([row], COLUMNS).splitlines()[-1], flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    rows = sorted((r for r in store.rows if r["n_train"] == len(y)),
                  key=lambda r: (r["workers"] is not None, r["workers"] or 0))
    dask_rows = {r["workers"]: r for r in rows if r["workers"]}
    module, sharded, sharded_error = None, [], None
    if not args.skip_sharded:
        try:
            module, sharded = sharded_part(args)
        except Exception as e:  # the first part's rows are stored already: report, do not lose them
            sharded_error = f"{type(e).__name__}: {e}"
            print(f"\nsecond part ({SHARDED}) failed: {sharded_error}", flush=True)
    result = {"rows": rows, "sharded": sharded, "sharded_error": sharded_error, **machine,
              "devices": [str(d) for d in jax.devices()], "n_train": len(y),
              "num_features": feature.num_features, "eps": args.eps,
              "partition_rows": args.partition_rows, "generate_s": gen.wall, "write_parquet_s": wr.wall,
              "speedup_2_vs_1_workers": (dask_rows[1]["wall_s"] / dask_rows[2]["wall_s"]
                                         if 1 in dask_rows and 2 in dask_rows else None),
              "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    print()
    print(harness.table(rows, COLUMNS))
    print(f"\n2 workers vs 1: {_f(result['speedup_2_vs_1_workers'], '.2f')}× faster; each partition sends "
          f"{rows[-1].get('partition_result_mb', 0):.1f} MB of partial sums; cores: {os.cpu_count()}")
    if sharded:
        print()
        print(harness.table(sharded, getattr(module, "COLUMNS", None)
                            or [(k, k, "") for k in sharded[0] if k != "part"]))
    store.write_json(result)
    return result


if __name__ == "__main__":
    main()
