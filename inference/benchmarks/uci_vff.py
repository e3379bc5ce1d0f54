"""Additive VFF (collapsed bound, one-pass statistics) versus inducing points (SGPR) on UCI regression.

Data: kin8nm (8192 × 8), power-plant (9568 × 4) and protein (45730 × 9) with their fixed train/test
splits (``ppl_sparsegp.datasets.load_uci``; data directory ``$PPL_SPARSEGP_DATA``, default
``../shared/data``), ``--splits`` chooses which.

* **VFF**: the airline model (``models.airline``): inputs normalised to [0, 1] by the training min/max,
  box [−2, 3], 30 frequencies per input (59 features each), additive Matérn-3/2 with LogNormal priors,
  Gaussian noise, targets standardised; sufficient statistics once (``fourier_statistics``), then MAP
  hyperparameters by L-BFGS on ``CollapsedGP.model``'s log density at O(M³) per step.
* **SGPR** (the inducing-point baseline): ``CollapsedGP(InducingPoints(Z), SquaredExponential(ARD))``,
  the collapsed Titsias bound on the whole training set (exact, no minibatch noise, so a strong SVGP
  proxy), ``--num-features`` inducing inputs fixed at a random subset of the standardised training
  inputs, MAP hyperparameters by the same L-BFGS; O(N M²) per step.

Metrics in the data's units: test RMSE and mean NLPD (Gaussian predictive with the noise), and the fit
time (statistics + optimisation, compilation included), mean ± sd over the splits.

``python -m inference.benchmarks.uci_vff [--quick] [--splits 0,1,2 | all] [--datasets kin8nm,...]``
writes ``results/uci_vff.json`` and prints a Markdown table.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Titsias (2009), Variational learning of inducing variables in sparse Gaussian processes.
"""
from __future__ import annotations

import math
import os
import time

from inference.benchmarks import harness

DATASETS = ("kin8nm", "power-plant", "protein-tertiary-structure")
METHODS = {"vff": "additive VFF (collapsed)", "sgpr": "SGPR, inducing points, ARD SE"}


def fit_vff(split, args):
    import jax

    from models import airline
    from ppl_sparsegp.approximations.map_estimate import map_lbfgs
    from ppl_sparsegp.datasets import standardise
    from ppl_sparsegp.diagnostics import nlpd, rmse
    from ppl_sparsegp.features.fourier_statistics import fourier_statistics

    X, y, Xs, ys_, scaler = standardise(split.X_train, split.y_train, split.X_test, split.y_test,
                                        x_scaling="minmax")
    if Xs.min() < airline.BOX[0] or Xs.max() > airline.BOX[1]:
        raise ValueError("a test input lies outside the box; widen airline.BOX")
    t0 = time.perf_counter()
    feature = airline.make_feature(X.shape[1], args.num_frequencies)
    stats = fourier_statistics(feature, X, y, method=args.stats_method)
    jax.block_until_ready(stats)
    t_stats = time.perf_counter() - t0
    gp = airline.make_gp(feature, stats)
    values, info = map_lbfgs(gp.model, gp.hyperparameter_sites(), num_steps=args.maxiter)
    fit_time = time.perf_counter() - t0
    t1 = time.perf_counter()
    m, v, noise = airline.predictive(gp, values, Xs, method=args.stats_method)
    predict_time = time.perf_counter() - t1
    ys = scaler["y_sd"]
    return {"rmse": rmse(ys_, m, y_scale=ys), "nlpd": nlpd(ys_, m, v + noise, y_scale=ys), "fit_s": fit_time,
            "stats_s": t_stats, "compile_s": info["compile_s"], "predict_s": predict_time,
            "iterations": info["iterations"], "num_features": feature.num_features}


def fit_sgpr(split, args, seed):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro.distributions as dist

    from ppl_sparsegp import CollapsedGP, Gaussian, InducingPoints, SquaredExponential
    from ppl_sparsegp.approximations.map_estimate import map_lbfgs
    from ppl_sparsegp.datasets import standardise
    from ppl_sparsegp.diagnostics import nlpd, rmse

    X, y, Xs, ys_, scaler = standardise(split.X_train, split.y_train, split.X_test, split.y_test)
    D = X.shape[1]
    M = min(args.num_features, len(y))
    Z = X[np.random.default_rng(seed).choice(len(y), M, replace=False)]
    kernel = SquaredExponential(variance=dist.LogNormal(0.0, 1.0),
                                lengthscale=dist.LogNormal(jnp.zeros(D), 1.0).to_event(1))
    gp = CollapsedGP(InducingPoints(Z), kernel, Gaussian(variance=dist.LogNormal(math.log(0.1), 1.0)))
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    t0 = time.perf_counter()
    values, info = map_lbfgs(gp.model, gp.hyperparameter_sites(), model_args=(Xj, yj), num_steps=args.maxiter)
    fit_time = time.perf_counter() - t0
    t1 = time.perf_counter()
    params = {k + "_map": jnp.asarray(v) for k, v in values.items()}
    pred = jax.jit(lambda Xs, X, y: gp.with_data(X, y).predict(Xs, params=params))(jnp.asarray(Xs), Xj, yj)
    predict_time = time.perf_counter() - t1
    m, v, ys = np.asarray(pred["y_mean"]), np.asarray(pred["y_var"]), scaler["y_sd"]
    return {"rmse": rmse(ys_, m, y_scale=ys), "nlpd": nlpd(ys_, m, v, y_scale=ys), "fit_s": fit_time,
            "compile_s": info["compile_s"], "predict_s": predict_time, "iterations": info["iterations"],
            "num_features": M}


def _parse_splits(text, n_splits):
    if text == "all":
        return list(range(n_splits))
    out = [int(s) for s in text.split(",")]
    bad = [s for s in out if not 0 <= s < n_splits]
    if bad:
        raise ValueError(f"--splits {bad} out of range 0..{n_splits - 1}")
    return out


def _summary(values):
    import numpy as np

    v = np.asarray(values, float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def main(argv=None):
    p = harness.parser("uci_vff", __doc__)
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--splits", default="0", help="comma-separated split numbers, or 'all' (default 0)")
    p.add_argument("--num-frequencies", type=int, default=30)
    p.add_argument("--num-features", type=int, default=200)
    p.add_argument("--stats-method", choices=("nufft", "dense"), default="nufft")
    p.add_argument("--maxiter", type=int, default=300)
    p.add_argument("--data-dir", default=None, help="default $PPL_SPARSEGP_DATA or ../shared/data")
    args = p.parse_args(argv)
    if args.quick:
        args.datasets, args.splits, args.num_features = "kin8nm,power-plant", "0", 100
    machine = harness.setup(args)
    import numpy as np

    from ppl_sparsegp.datasets import data_dir, load_uci

    root = data_dir(args.data_dir)
    store = harness.Store(args.out, ["dataset", "split", "method"], resume=args.resume, merge=args.merge,
                          settings={k: getattr(args, k) for k in ("num_frequencies", "num_features", "stats_method",
                                                                  "maxiter")})
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    for name in datasets:
        n_splits = int(np.loadtxt(root / "uci" / name / "n_splits.txt"))
        for k in _parse_splits(args.splits, n_splits):
            if all(store.done(name, k, method) for method in METHODS):
                continue
            split = load_uci(name, k, root=root)
            for method, fn in (("vff", lambda s: fit_vff(s, args)), ("sgpr", lambda s: fit_sgpr(s, args, k))):
                r = fn(split)
                r.update(dataset=name, split=k, method=method, n_train=len(split.y_train),
                         D=split.X_train.shape[1], load=os.getloadavg()[0])
                store.add(r)
                print(f"{name} split {k} {method}: RMSE {r['rmse']:.4f} NLPD {r['nlpd']:.3f} "
                      f"fit {r['fit_s']:.1f}s (load {r['load']:.1f})", flush=True)
    summary = []
    for name in dict.fromkeys(r["dataset"] for r in store.rows):
        for method, label in METHODS.items():
            rs = [r for r in store.rows if r["dataset"] == name and r["method"] == method]
            if rs:
                summary.append({"dataset": name, "method": label, "n_train": rs[0]["n_train"], "D": rs[0]["D"],
                                "num_features": rs[0]["num_features"], "splits": len(rs),
                                **{m: _summary([r[m] for r in rs]) for m in ("rmse", "nlpd", "fit_s", "predict_s")}})
    print()
    print(harness.table(summary, [
        ("data set", "dataset", ""), ("N train", "n_train", "d"), ("D", "D", "d"), ("method", "method", ""),
        ("M", "num_features", "d"), ("RMSE", "rmse", harness.pm(4, always=True)),
        ("NLPD", "nlpd", harness.pm(3, always=True)), ("fit s", lambda r: r["fit_s"][0], ".1f"),
        ("predict s", lambda r: r["predict_s"][0], ".1f"), ("splits", "splits", "d")]))
    store.write_json({"rows": store.rows, "summary": summary, "num_frequencies": args.num_frequencies,
                      "num_features": args.num_features, **machine})
    return summary


if __name__ == "__main__":
    main()
