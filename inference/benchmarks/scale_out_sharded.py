"""Milliseconds per gradient of a data-sharded Poisson SparseGP log density: 1 and 2 devices, 2 processes.

The MCMC formulation (``SparseGP.model``, the potential energy NUTS differentiates) of a Poisson
likelihood on N 1-D inputs with whitened VFF features, the lengthscale and variance sampled. Each
configuration runs in its own process(es), since the host device count (``XLA_FLAGS``) is fixed when JAX
starts, with one XLA thread per device and one core per device:

* ``unsharded``: the plain model on one device, one core: the reference of every ratio;
* ``unsharded, XLA threads``: the same on two cores with XLA's own intra-op threads (what one gets
  without sharding);
* ``sharded``: X, y split over a ``data_mesh()`` of 1 or 2 forced host devices in one process
  (``shard_data``; the likelihood runs per block in ``shard_map``, see :mod:`ppl_sparsegp.sharding`);
* ``2 processes``: the same over 2 processes of 1 device each on JAX's distributed runtime (gloo
  collectives), started by ``python -m inference.launch --processes 2 --pin``, each process holding
  only its own rows.

Compilation (trace, lower, compile) is reported apart from the steady-state call (median of
``--repeats``). ``python -m inference.benchmarks.scale_out_sharded [--quick] [--n N] [--M M]`` prints a
Markdown table and writes results/scale_out_sharded.json; :func:`rows` returns its rows (for
``inference.benchmarks.scale_out``).

The worker (``--worker``) is the program each process runs; with ``--check`` it instead evaluates the log
density and its gradient once at NumPyro's initial point and writes them (the multi-process test).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from inference.benchmarks import harness

ONE_THREAD = harness.ONE_THREAD_XLA
FORCE = "--xla_force_host_platform_device_count"
MODULE = "inference.benchmarks.scale_out_sharded"  # the worker's module (__name__ is "__main__" when run)

#: (name, mode, devices per process, processes, cores, one XLA thread per device)
CONFIGS = [
    ("unsharded", "unsharded", 1, 1, 1, True),
    ("unsharded, XLA threads", "unsharded", 1, 1, 2, False),
    ("sharded, 1 device", "sharded", 1, 1, 1, True),
    ("sharded, 2 devices", "sharded", 2, 1, 2, True),
    ("sharded, 2 processes", "sharded", 1, 2, 2, True),
]


def sizes(args) -> tuple:
    """(N, M frequencies, repeats) of a run (``--quick``: a smoke run)."""
    if getattr(args, "quick", False):
        return 4_000, 16, 5
    return (getattr(args, "n", None) or 200_000, getattr(args, "M", None) or 100,
            getattr(args, "repeats", None) or 20)


def rows(args) -> list:
    """Time every configuration (each in fresh processes); one row each, with ratios to the unsharded
    one-device reference of the same run."""
    n, M, repeats = sizes(args)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, mode, devices, processes, ncores, one_thread in CONFIGS:
            if cores is not None and len(cores) < ncores:
                print(f"skipping {name!r}: needs {ncores} cores, this process may use {cores}", flush=True)
                continue
            result = Path(tmp) / f"{len(out)}.json"
            worker = ["--worker", "--mode", mode, "--n", str(n), "--M", str(M), "--repeats", str(repeats),
                      "--result", str(result)]
            env = dict(os.environ)
            flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith((FORCE, ONE_THREAD.split("=")[0]))]
            env["XLA_FLAGS"] = " ".join(flags + [f"{FORCE}={devices}"] + ([ONE_THREAD] if one_thread else []))
            if processes == 1:
                cmd = [sys.executable, "-m", MODULE, *worker]
                use = None if cores is None else set(cores[:ncores])
                pre = None if use is None else (lambda use=use: os.sched_setaffinity(0, use))
            else:
                cmd = [sys.executable, "-m", "inference.launch", "--processes", str(processes),
                       "--devices-per-process", str(devices), "--pin", "--timeout", "1800", "--",
                       MODULE, *worker]
                pre = None
            done = subprocess.run(cmd, env=env, preexec_fn=pre, cwd=Path(__file__).resolve().parents[2])
            if done.returncode != 0:
                raise RuntimeError(f"{name}: worker exited with status {done.returncode}")
            r = json.loads(result.read_text())
            out.append({"benchmark": "scale_out_sharded", "config": name, "n": n, "M": M, "features": 2 * M - 1,
                        "devices": r["devices"], "processes": r["processes"], "cores": ncores,
                        "compile_s": r["compile_s"], "ms_per_grad": 1e3 * r["median_s"],
                        "mean_ms_per_grad": 1e3 * r["mean_s"]})
            print(f"{name}: {out[-1]['ms_per_grad']:.1f} ms per gradient, compile {r['compile_s']:.1f} s",
                  flush=True)
    ref = next((r for r in out if r["config"] == "unsharded"), None)
    for r in out:
        r["speedup"] = None if ref is None else ref["ms_per_grad"] / r["ms_per_grad"]
    return out


COLUMNS = [("configuration", "config", ""), ("devices", "devices", "d"), ("processes", "processes", "d"),
           ("cores", "cores", "d"), ("ms / gradient", "ms_per_grad", ".1f"),
           ("speed-up vs unsharded", "speedup", ".2f"), ("compile s", "compile_s", ".1f")]


# --- the worker -------------------------------------------------------------------------------------
def problem(n: int, M: int):
    """The data set (numpy, all N rows: deterministic, so every process can take its own) and the model."""
    import numpy as np
    import numpyro.distributions as dist

    from ppl_sparsegp import FourierFeatures, Matern32, Poisson, SparseGP

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, (n, 1))
    y = rng.poisson(np.exp(1.0 + np.sin(8.0 * X[:, 0]))).astype(float)
    kernel = Matern32(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 1.0))
    return X, y, SparseGP(FourierFeatures(-1.0, 2.0, M), kernel, Poisson())


def worker(argv):
    p = argparse.ArgumentParser(prog=f"python -m {MODULE} --worker")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--mode", choices=["sharded", "unsharded"], required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--M", type=int, required=True)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--check", action="store_true", help="evaluate value and gradient once, no timing")
    p.add_argument("--result", type=Path, required=True)
    args = p.parse_args(argv)
    from ppl_sparsegp.sharding import initialize_distributed

    initialize_distributed()
    import jax
    import numpy as np
    from numpyro.infer.util import initialize_model, potential_energy

    from ppl_sparsegp.sharding import process_rows, shard_data

    jax.config.update("jax_enable_x64", True)
    X, y, gp = problem(args.n, args.M)
    if args.mode == "sharded":
        rows_ = process_rows(args.n)  # this process's rows only: the global arrays are assembled on devices
        X, y = shard_data(X[rows_], y[rows_])
    else:
        X, y = jax.numpy.asarray(X), jax.numpy.asarray(y)
    z = initialize_model(jax.random.PRNGKey(0), gp.model, model_args=(X, y)).param_info.z

    def potential(z, X, y):  # the data enter jit as arguments: they stay where they live
        return potential_energy(gp.model, (X, y), {}, z)

    record = {"devices": jax.device_count(), "processes": jax.process_count(), "n": args.n, "M": args.M}
    if args.check:
        compiled = jax.jit(jax.value_and_grad(potential)).lower(z, X, y).compile()
        hlo = compiled.as_text()
        value, grad = compiled(z, X, y)
        record.update(value=float(value), grad={k: np.asarray(v).tolist() for k, v in grad.items()},
                      all_gathers=hlo.count(" all-gather("), all_reduces=hlo.count(" all-reduce("))
    else:
        t = harness.timed(jax.value_and_grad(potential), z, X, y, repeats=args.repeats)
        record.update(compile_s=t.compile_s, median_s=t.median_s, mean_s=t.mean_s)
    if jax.process_index() == 0:
        args.result.write_text(json.dumps(record))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:
        return worker(argv)
    p = harness.parser("scale_out_sharded", __doc__, cpu="all")
    p.add_argument("--n", type=int, default=200_000, help="number of observations")
    p.add_argument("--M", type=int, default=100, help="VFF frequencies (2M − 1 features)")
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    if args.out is None:  # harness.setup would start JAX here, which this parent does not need
        folder = Path(tempfile.gettempdir()) / "ppl_sparsegp-benchmarks" if args.quick else harness.RESULTS
        args.out = folder / "scale_out_sharded.jsonl"
    n, M, repeats = sizes(args)
    load = os.getloadavg()
    table_rows = rows(args)
    print(f"\nN = {n}, M = {M} frequencies ({2 * M - 1} features), float64; load average before "
          f"{load[0]:.1f}, after {os.getloadavg()[0]:.1f}\n")
    print(harness.table(table_rows, COLUMNS))
    store = harness.Store(args.out, ["config"], settings={"n": n, "M": M, "repeats": repeats})
    for r in table_rows:
        store.add(r)
    store.write_json({"n": n, "M": M, "rows": table_rows, "load_average": [load, os.getloadavg()],
                      "cpu_count": os.cpu_count()})


if __name__ == "__main__":
    main()
