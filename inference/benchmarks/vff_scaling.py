"""Scaling of the one-pass additive VFF fit to the airline size: 3.95 million training points, 8 inputs.

The VFF paper's headline [1, §6.2, Table 2]: additive Matérn-3/2, 30 frequencies per input (472
features), on all 5.93M airline rows (2/3 = 3.95M training points) in 265 s wall (626 s CPU) on a 2-core
laptop. Here, per training size N (10⁴, 10⁵, 10⁶ and 3,952,942; ``--quick``: 10⁴ and 10⁵), on synthetic
airline-like data with a known additive truth (``models.airline.synthetic``: 1.5 N rows, a random 2/3
train, 1/3 test split, normalised and standardised as the paper), the stages of the whole fit are
timed separately:

1. **statistics**: ``fourier_statistics(method="nufft")``, one pass; the exact dense-product path
   (``method="dense"``) on the same data is timed too, with the max-norm relative difference of A;
2. **optimise**: MAP of the 17 hyperparameters by L-BFGS on the log density of ``CollapsedGP.model``
   with the precomputed statistics (O(M³) per evaluation; the SVI point-guide objective);
3. **predict**: predictive mean and variance at every test point, streamed (``fourier_conditional``,
   adjoint NUFFT), then test MSE and NLPD on the standardised target; ``oracle MSE`` is the MSE of the
   noise-free truth (the best any model can do).

Whole fit = statistics + optimise + predict (compilation included; data generation excluded; the
split and min–max scaling of the inputs, ``prep``, is NumPy work on the raw arrays, reported apart). Each
row reports wall and process CPU seconds, the 1-minute load average before and after (the machine may
be shared: CPU seconds are the steadier measure there), and the process's peak resident memory so far.
The dense/NUFFT time ratio is measured in the same run; the slope of log time against log N shows the
linear scaling.

``python -m inference.benchmarks.vff_scaling [--quick] [--sizes 1e4,1e5] [--dense-max N] [--devices K]``
writes ``results/vff_scaling.json`` and prints a Markdown table.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
"""
from __future__ import annotations

import os
import resource

from inference.benchmarks import harness

FULL_TRAIN = 3_952_942  # 2/3 of the 5,929,413 airline rows of 2008


def _peak_rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def run_size(n_train, args):
    import jax
    import numpy as np

    from models import airline
    from ppl_sparsegp.approximations.map_estimate import map_lbfgs
    from ppl_sparsegp.features.fourier_statistics import fourier_statistics

    row = {"n_train": int(n_train), "load_before": os.getloadavg()[0]}
    with harness.clock() as gen:
        n_total = int(round(n_train * 1.5))
        X, y, names, f = airline.synthetic(n_total, seed=args.seed)
    row["generate_s"] = gen.wall
    with harness.clock() as prep:
        data = airline.prepare(X, y, seed=args.seed)
        del X, y
    f_test = (f[data["test_index"]] - data["y_mean"]) / data["y_std"]
    row["n_test"] = int(len(data["y_test"]))
    feature = airline.make_feature(len(names), args.num_frequencies)
    row["num_features"] = feature.num_features

    with harness.clock() as st:
        stats = fourier_statistics(feature, data["X"], data["y"], method="nufft", eps=args.eps,
                                   chunk_size=args.chunk_size)
        jax.block_until_ready(stats)
    row.update(stats_nufft_s=st.wall, stats_nufft_cpu_s=st.cpu)
    if n_train <= args.dense_max:
        with harness.clock() as sd:
            dense = fourier_statistics(feature, data["X"], data["y"], method="dense")
            jax.block_until_ready(dense)
        row.update(stats_dense_s=sd.wall, stats_dense_cpu_s=sd.cpu,
                   nufft_vs_dense_rel_err=float(np.max(np.abs(np.asarray(stats.A) - np.asarray(dense.A)))
                                                / np.max(np.abs(np.asarray(dense.A)))))
        del dense

    gp = airline.make_gp(feature, stats)
    with harness.clock() as opt:
        values, info = map_lbfgs(gp.model, gp.hyperparameter_sites(), num_steps=args.maxiter)
    row.update(optimise_s=opt.wall, optimise_cpu_s=opt.cpu, lbfgs_iterations=info["iterations"],
               lbfgs_evaluations=info["evaluations"], optimise_compile_s=info["compile_s"],
               noise_variance=float(values["likelihood_variance"]))

    with harness.clock() as pr:
        metrics = airline.test_metrics(gp, [values], data["X_test"], data["y_test"], method="nufft",
                                       chunk_size=args.chunk_size)
    row.update(predict_s=pr.wall, predict_cpu_s=pr.cpu, **metrics,
               oracle_mse=float(np.mean((data["y_test"] - f_test) ** 2)))
    row["prep_s"] = prep.wall
    row["prep_cpu_s"] = prep.cpu
    row["whole_fit_s"] = st.wall + opt.wall + pr.wall  # the issue's three stages; prep reported apart
    row["whole_fit_cpu_s"] = st.cpu + opt.cpu + pr.cpu
    row["peak_rss_gb"] = _peak_rss_gb()
    row["load_after"] = os.getloadavg()[0]
    return row


def _fmt(v, spec=".1f"):
    return "—" if v is None else format(v, spec)


COLUMNS = [
    ("N train", "n_train", ","), ("prep s", "prep_s", ".1f"),
    ("stats NUFFT s (cpu)", lambda r: f"{r['stats_nufft_s']:.1f} ({r['stats_nufft_cpu_s']:.1f})", ""),
    ("stats dense s (cpu)", lambda r: f"{_fmt(r.get('stats_dense_s'))} ({_fmt(r.get('stats_dense_cpu_s'))})", ""),
    ("dense/NUFFT", lambda r: r["stats_dense_s"] / r["stats_nufft_s"] if r.get("stats_dense_s") else None, ".2f"),
    ("optimise s (iters)", lambda r: f"{r['optimise_s']:.1f} ({r['lbfgs_iterations']})", ""),
    ("compile s (L-BFGS objective)", "optimise_compile_s", ".1f"), ("predict s", "predict_s", ".1f"),
    ("whole fit s (cpu)", lambda r: f"{r['whole_fit_s']:.1f} ({r['whole_fit_cpu_s']:.1f})", ""),
    ("test MSE", "test_mse", ".3f"), ("oracle MSE", "oracle_mse", ".3f"), ("NLPD", "test_nlpd", ".3f"),
    ("peak RSS GB", "peak_rss_gb", ".2f"),
    ("load 1-min", lambda r: f"{r['load_before']:.1f}→{r['load_after']:.1f}", "")]


def slope(rows, key):
    import numpy as np

    pts = [(r["n_train"], r[key]) for r in rows if r.get(key)]
    if len(pts) < 2:
        return None
    n, t = np.log(np.array(pts, float)).T
    return float(np.polyfit(n, t, 1)[0])


def main(argv=None):
    p = harness.parser("vff_scaling", __doc__)
    p.add_argument("--sizes", default=None, help="comma-separated training sizes (default 1e4,1e5,1e6,3952942)")
    p.add_argument("--dense-max", type=float, default=float(FULL_TRAIN),
                   help="time the dense statistics only up to this N (default: all sizes)")
    p.add_argument("--devices", type=int, default=1,
                   help="host devices to shard the chunks over (default 1: FINUFFT and XLA already use every core)")
    p.add_argument("--num-frequencies", type=int, default=30)
    p.add_argument("--eps", type=float, default=1e-12, help="NUFFT tolerance")
    p.add_argument("--chunk-size", type=int, default=None, help="rows per device per step")
    p.add_argument("--maxiter", type=int, default=500, help="L-BFGS iterations at most")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    machine = harness.setup(args, devices=args.devices)
    import jax

    if args.sizes:
        sizes = [int(float(s)) for s in args.sizes.split(",")]
    else:
        sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000, FULL_TRAIN]
    store = harness.Store(args.out, ["n_train"], resume=args.resume, merge=args.merge,
                          settings={k: getattr(args, k) for k in ("dense_max", "devices", "num_frequencies", "eps",
                                                                  "chunk_size", "maxiter", "seed")})
    for n in sizes:
        if not store.done(n):
            store.add(run_size(n, args))
            print(harness.table([store.get(n)], COLUMNS).splitlines()[-1], flush=True)
    rows = sorted(store.rows, key=lambda r: r["n_train"])
    result = {
        "rows": rows, "devices": [str(d) for d in jax.devices()], **machine,
        "eps": args.eps, "num_frequencies": args.num_frequencies,
        "slope_stats_nufft": slope(rows, "stats_nufft_s"), "slope_stats_dense": slope(rows, "stats_dense_s"),
        "slope_whole_fit": slope(rows, "whole_fit_s"),
        "paper": {"n_train": FULL_TRAIN, "wall_s": 265, "cpu_s": 626, "hardware": "2-core MacBook Pro",
                  "vff_mse": 0.827, "vff_nlpd": 1.324},
        "targets": {"stats_s": 15, "whole_fit_s": 30},
    }
    print()
    print(harness.table(rows, COLUMNS))
    print(f"\nslope of log time vs log N: statistics NUFFT {_fmt(result['slope_stats_nufft'], '.2f')}, "
          f"dense {_fmt(result['slope_stats_dense'], '.2f')}, whole fit {_fmt(result['slope_whole_fit'], '.2f')}; "
          f"devices: {len(jax.devices())}, cores: {os.cpu_count()}")
    store.write_json(result)
    return result


if __name__ == "__main__":
    main()
