"""Spherical harmonic features (issue 31) against inducing points and additive VFF, in one run.

(a) **UCI** (``--datasets``; the sets of Dutordoir et al. 2020 that ``../shared/data/uci`` has: power-plant,
    energy, concrete, kin8nm, yacht; split ``--split`` of the standard 20): SVGP (``SparseGP``, Gaussian
    likelihood, Adam, minibatches of ``--batch``, ``--epochs`` epochs, MAP hyperparameters under LogNormal
    priors, the library's default q family) with

    * **spherical**: ``SphericalHarmonicFeatures`` + ``ChordalMatern(3/2)`` on standardised inputs, every
      degree up to the largest with at most ``--max-features`` features (d = 9: 660, d = 5: 825, d = 7: 672);
    * **spherical-diag**: the same with a mean-field q(u) (``q_cov="diag"``): O(N_b M) per step;
    * **spherical-collapsed**: the same features with the optimal q(u) (``CollapsedGP``): the map (s, b)
      from a MAP fit on ``--collapsed-subsample`` rows, the one-pass statistics of all rows, L-BFGS over
      the rest; no epochs (``fit_s`` is its whole fit): what any q could reach with these features;
    * **svgp-ip**: inducing points at the same M (a fixed random subset of the training inputs) with an ARD
      squared exponential;
    * **vff**: additive VFF (Matérn-3/2, inputs min–max scaled, box [−2, 3]) with F frequencies per input,
      D(2F − 1) ≈ M.

    ``--methods`` picks them (svgp-ip always). Test RMSE and NLPD in the data's units, the seconds per
    epoch (the mean over epochs 2…E: epoch 1 carries the compilation, reported apart) and the whole fit's
    seconds (``fit_s``, compilation included), each as a ratio to inducing points'.

(b) **airline size** (``--airline-n``, default 3 952 942 training rows; ``models.airline.synthetic`` with the
    split of ``vff_scaling``): the map's scales and bias from a MAP fit on a 5 000-row subsample, then the
    one-pass statistics (``spherical_statistics``) of all rows with them fixed, MAP of σ², ℓ and the noise by
    L-BFGS on ``CollapsedGP`` at O(M³) per step, prediction in chunks; against SVGP with inducing points at
    the same M for ``--airline-svgp-steps`` minibatches of 1024 (a full epoch is 3 860 steps: its time is
    extrapolated from the measured step), and VFF additive's stored figures from
    ``results/vff_scaling.json`` (same generator, seed and split). SGPR at this N (O(N M²) per L-BFGS
    evaluation) is not run.

(c) **cost per gradient** against M: one SVI step (value and gradient of the minibatch ELBO, batch 256,
    d = 9) for spherical features (full q(u), and ``spherical-diag``: mean-field q(u)) and inducing points
    at the same M. With a full q the O(N_b M²) of the variance term remains for every family; the
    spherical features remove the M³ of Kuu's Cholesky; with a mean-field q nothing is quadratic in M.

``python -m inference.benchmarks.spherical [--quick] [--parts a,b,c]`` writes ``results/spherical.json``
and prints Markdown tables.

References:
    1. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic features, ICML.
    2. Hensman, Fusi, Lawrence (2013), Gaussian processes for big data, UAI.
    3. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
"""
from __future__ import annotations

import math
import os
import time

from inference.benchmarks import harness

UCI = ("kin8nm", "power-plant", "energy", "concrete", "yacht")


def spherical_degree(D, max_features):
    """The largest L whose every-degree feature count is ≤ max_features (at least 1)."""
    from ppl_sparsegp.features.spherical import num_harmonics

    L, total = 0, 1
    while total + num_harmonics(D + 1, L + 1) <= max_features:
        L += 1
        total += num_harmonics(D + 1, L)
    return max(L, 1)


def make_model(method, D, M_target, X):
    """(gp, M) for one method on D inputs."""
    import jax.numpy as jnp
    import numpy as np
    import numpyro.distributions as dist

    from models import airline
    from ppl_sparsegp import (
        Additive,
        ChordalMatern,
        Gaussian,
        InducingPoints,
        Matern32,
        SparseGP,
        SphericalHarmonicFeatures,
        SquaredExponential,
    )

    noise = Gaussian(variance=dist.LogNormal(math.log(0.1), 1.0))
    if method in ("spherical", "spherical-diag"):
        kernel = ChordalMatern(1.5, variance=dist.LogNormal(0.0, 1.0),
                               lengthscale=dist.LogNormal(jnp.full(D, math.log(math.sqrt(D))), 1.0).to_event(1),
                               bias=dist.LogNormal(0.0, 1.0), chordal_lengthscale=dist.LogNormal(0.0, 1.0))
        feature = SphericalHarmonicFeatures(D, spherical_degree(D, M_target))
        if method == "spherical-diag":  # mean-field q(u): no M × M factor anywhere, O(N_b M) per step
            return SparseGP(feature, kernel, noise, q_cov="diag"), feature.num_features
    elif method == "svgp-ip":
        kernel = SquaredExponential(variance=dist.LogNormal(0.0, 1.0),
                                    lengthscale=dist.LogNormal(jnp.zeros(D), 1.0).to_event(1))
        Z = X[np.random.default_rng(0).choice(len(X), min(M_target, len(X)), replace=False)]
        feature = InducingPoints(jnp.asarray(Z))
    else:  # additive VFF
        F = max(2, int(round((M_target / D + 1) / 2)))
        feature = airline.make_feature(D, F)
        kernel = Additive([Matern32(variance=dist.LogNormal(math.log(0.1), 1.5),
                                    lengthscale=dist.LogNormal(math.log(0.3), 1.0)) for _ in range(D)])
    return SparseGP(feature, kernel, noise), feature.num_features


def train_svgp(gp, X, y, *, epochs, batch, lr, seed=0, steps=None):
    """Adam on the minibatch ELBO; returns (params, seconds per epoch (list; the first has the compilation)).
    ``steps``: steps per "epoch" (default N // batch)."""
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import SVI, TraceMeanField_ELBO

    X, y = jnp.asarray(X), jnp.asarray(y)
    B = min(batch, len(y))
    steps = max(1, len(y) // B) if steps is None else int(steps)
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(lr), TraceMeanField_ELBO())
    state = svi.init(jax.random.PRNGKey(seed), X, y, batch_size=B)

    @jax.jit
    def epoch(state, X, y):
        return jax.lax.fori_loop(0, steps, lambda i, s: svi.update(s, X, y, batch_size=B)[0], state)

    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        state = jax.block_until_ready(epoch(state, X, y))
        times.append(time.perf_counter() - t0)
    return svi.get_params(state), times


def predict_chunks(gp, params, Xs, chunk=4096):
    import jax
    import jax.numpy as jnp
    import numpy as np

    # params as an argument, not a closure: closed-over arrays become constants that XLA folds at compile time
    # (20-30 s for the M = 660 products, measured)
    fn = jax.jit(lambda Xc, p: gp.predict(Xc, params=p))
    ms, vs = [], []
    for i in range(0, len(Xs), chunk):
        out = fn(jnp.asarray(Xs[i:i + chunk]), params)
        ms.append(np.asarray(out["y_mean"]))
        vs.append(np.asarray(out["y_var"]))
    return np.concatenate(ms), np.concatenate(vs)


def run_uci_collapsed(name, args, X, y, Xs, ys_, scaler):
    """The same features with the optimal q(u) (:func:`ppl_sparsegp.fit_spherical`, the airline part's
    recipe at UCI size, on ``--collapsed-subsample`` rows for the map): what SVGP's q could reach with these
    features, so a gap to inducing points can be told apart from SVGP's optimisation."""
    import numpyro.distributions as dist

    from ppl_sparsegp import Gaussian, SphericalHarmonicFeatures, fit_spherical
    from ppl_sparsegp.diagnostics import nlpd, rmse

    D = X.shape[1]
    feature = SphericalHarmonicFeatures(D, spherical_degree(D, args.max_features))
    prior, _ = make_model("spherical", D, feature.num_features, X)
    with harness.clock() as clock:
        fit = fit_spherical(feature, prior.kernel, Gaussian(variance=dist.LogNormal(math.log(0.1), 1.0)), X, y,
                            subsample=args.collapsed_subsample, num_steps=args.maxiter, chunk_size=2048, rng_key=1)
    m, v = fit.predict(Xs, chunk_size=2048)
    v = v + fit.noise_variance
    return {"dataset": name, "method": "spherical-collapsed", "M": int(feature.num_features), "n_train": len(y),
            "D": D, "rmse": rmse(ys_, m, y_scale=scaler["y_sd"]), "nlpd": nlpd(ys_, m, v, y_scale=scaler["y_sd"]),
            "fit_s": clock.wall, "subsample": min(args.collapsed_subsample, len(y)),
            "lbfgs_iterations": fit.info["full"]["iterations"], "epochs": None, "load": os.getloadavg()[0]}


def run_uci(name, method, args, root):
    import warnings

    from ppl_sparsegp.datasets import load_uci, standardise
    from ppl_sparsegp.diagnostics import nlpd, rmse

    split = load_uci(name, args.split, root=root)
    scaling = "minmax" if method == "vff" else "standard"
    X, y, Xs, ys_, scaler = standardise(split.X_train, split.y_train, split.X_test, split.y_test, x_scaling=scaling)
    if method == "spherical-collapsed":
        return run_uci_collapsed(name, args, X, y, Xs, ys_, scaler)
    from ppl_sparsegp.features.spherical import num_harmonics

    D = X.shape[1]
    M_equal = sum(num_harmonics(D + 1, n) for n in range(spherical_degree(D, args.max_features) + 1))
    gp, M = make_model(method, D, M_equal, X)  # every method at the spherical features' M
    params, times = train_svgp(gp, X, y, epochs=args.epochs, batch=args.batch, lr=args.lr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # far test inputs are reported by the warning, not needed here
        m, v = predict_chunks(gp, params, Xs)
    ys = scaler["y_sd"]
    steady = times[1:] if len(times) > 1 else times
    return {"dataset": name, "method": method, "M": int(M), "n_train": len(y), "D": X.shape[1],
            "rmse": rmse(ys_, m, y_scale=ys), "nlpd": nlpd(ys_, m, v, y_scale=ys), "fit_s": sum(times),
            "epoch_s": sum(steady) / len(steady), "first_epoch_s": times[0], "epochs": args.epochs,
            "batch": args.batch, "load": os.getloadavg()[0]}


# --- (b) the airline-size set through one-pass statistics -------------------------------------------------------
def airline_data(n_train):
    """The airline-size synthetic set: ``models.airline.synthetic`` of 1.5 ``n_train`` rows, the split of
    ``vff_scaling``, inputs centred in [−½, ½]: ``(Xtr, ytr, Xte, yte, f_test)`` (f_test: the noise-free
    standardised test target)."""
    from models import airline

    X, y, names, f = airline.synthetic(int(round(n_train * 1.5)), seed=0)
    data = airline.prepare(X, y, seed=0)
    del X, y
    f_test = (f[data["test_index"]] - data["y_mean"]) / data["y_std"]
    return data["X"] - 0.5, data["y"], data["X_test"] - 0.5, data["y_test"], f_test


def airline_model(D, L):
    """``(feature, map_feature, kernel prior, likelihood, fit_spherical's keyword arguments)`` of part (b):
    degree ``L`` features, the map from degree ≤ 3 on 5 000 rows (seed 1)."""
    import jax.numpy as jnp
    import numpyro.distributions as dist

    from ppl_sparsegp import ChordalMatern, Gaussian, SphericalHarmonicFeatures

    prior = ChordalMatern(1.5, variance=dist.LogNormal(0.0, 1.0),
                          lengthscale=dist.LogNormal(jnp.full(D, math.log(0.5)), 1.0).to_event(1),
                          bias=dist.LogNormal(0.0, 1.0), chordal_lengthscale=dist.LogNormal(0.0, 1.0))
    map_feature = SphericalHarmonicFeatures(D, min(L, 3))
    return (SphericalHarmonicFeatures(D, L), map_feature, prior,
            Gaussian(variance=dist.LogNormal(math.log(0.5), 1.0)),
            {"map_feature": map_feature, "subsample": 5000, "seed": 1})


def run_airline(args):
    import numpy as np

    from ppl_sparsegp import fit_spherical

    Xtr, ytr, Xte, yte, f_test = airline_data(args.airline_n)
    D = Xtr.shape[1]
    L = args.airline_degree
    row = {"n_train": len(ytr), "n_test": len(yte), "D": D, "max_degree": L, "load_before": os.getloadavg()[0],
           "oracle_mse": float(np.mean((yte - f_test) ** 2))}
    with harness.clock() as total:
        feature, _, prior, lik, kw = airline_model(D, L)
        fit = fit_spherical(feature, prior, lik, Xtr, ytr, num_steps=args.maxiter, chunk_size=args.chunk, **kw)
        with harness.clock() as pr:  # 4. prediction in chunks from the optimal whitened q
            m, v = fit.predict(Xte, chunk_size=args.chunk)
            v = v + fit.noise_variance
    secs, info = fit.seconds, fit.info["full"]
    row.update(num_features=feature.num_features, subsample_fit_s=secs["subsample"], stats_s=secs["statistics"],
               optimise_s=secs["optimise"], lbfgs_iterations=info["iterations"],
               predict_s=pr.wall, whole_fit_s=total.wall, whole_fit_cpu_s=total.cpu,
               fit_without_predict_s=secs["subsample"] + secs["statistics"] + secs["optimise"],
               test_mse=float(np.mean((yte - m) ** 2)),
               test_nlpd=float(np.mean(0.5 * np.log(2 * np.pi * v) + 0.5 * (yte - m) ** 2 / v)),
               noise_variance=fit.noise_variance, scales=np.asarray(fit.kernel.lengthscale).tolist(),
               bias=float(fit.kernel.bias))
    # SVGP with inducing points at the same M: --airline-svgp-steps minibatches of 1024 (an epoch is 3 860)
    if args.airline_svgp_steps:
        gp_ip, M = make_model("svgp-ip", D, feature.num_features, Xtr)
        with harness.clock() as sv:
            params, times = train_svgp(gp_ip, Xtr, ytr, epochs=2, batch=1024, lr=0.02,
                                       steps=args.airline_svgp_steps // 2)
            mi, vi = predict_chunks(gp_ip, params, Xte, chunk=args.chunk)
        row.update(svgp_ip_M=int(M), svgp_ip_steps=2 * (args.airline_svgp_steps // 2),
                   svgp_ip_step_s=times[1] / (args.airline_svgp_steps // 2),
                   svgp_ip_epoch_estimate_s=times[1] / (args.airline_svgp_steps // 2) * (len(ytr) // 1024),
                   svgp_ip_whole_s=sv.wall,
                   svgp_ip_test_mse=float(np.mean((yte - mi) ** 2)),
                   svgp_ip_test_nlpd=float(np.mean(0.5 * np.log(2 * np.pi * vi) + 0.5 * (yte - mi) ** 2 / vi)))
    row["load_after"] = os.getloadavg()[0]
    return row


# --- (c) cost per gradient ----------------------------------------------------------------------------------------
def run_cost(args):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    from numpyro.infer import SVI, TraceMeanField_ELBO

    D, B = 8, 256
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(4096, D)))
    y = jnp.asarray(np.sin(np.asarray(X).sum(1)) + 0.1 * rng.normal(size=4096))
    rows = []
    for L in args.cost_degrees:
        from ppl_sparsegp.features.spherical import num_harmonics
        M = sum(num_harmonics(D + 1, n) for n in range(L + 1))
        for method in args.cost_methods:
            gp, M_used = make_model(method, D, M, np.asarray(X))
            svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.01), TraceMeanField_ELBO())
            state = svi.init(jax.random.PRNGKey(0), X, y, batch_size=B)
            t = harness.timed(lambda s: svi.update(s, X, y, batch_size=B)[0], state, repeats=args.repeats)
            rows.append({"method": method, "max_degree": L, "M": int(M_used), "step_ms": 1e3 * t.median_s,
                         "compile_s": t.compile_s})
            print(f"cost L={L} M={M_used} {method}: {1e3 * t.median_s:.2f} ms/step", flush=True)
    slopes = {}
    for method in args.cost_methods:
        pts = [(r["M"], r["step_ms"]) for r in rows if r["method"] == method and r["M"] >= 50]
        if len(pts) >= 2:
            m, t = np.log(np.array(pts, float)).T
            slopes[method] = float(np.polyfit(m, t, 1)[0])
    return rows, slopes


def main(argv=None):
    p = harness.parser("spherical", __doc__)
    p.add_argument("--parts", default="a,b,c")
    p.add_argument("--datasets", default=",".join(UCI))
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--max-features", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--airline-n", type=int, default=3_952_942)
    p.add_argument("--airline-degree", type=int, default=3)
    p.add_argument("--airline-svgp-steps", type=int, default=400)
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--maxiter", type=int, default=200)
    p.add_argument("--cost-degrees", default="1,2,3,4")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--cost-methods", default="spherical,svgp-ip",
                   help="of spherical (full q), spherical-diag (mean-field q), svgp-ip")
    p.add_argument("--methods", default="spherical,spherical-diag,spherical-collapsed,svgp-ip,vff",
                   help="part (a)'s methods, of spherical (full q), spherical-diag (mean-field q), "
                        "spherical-collapsed (optimal q, one-pass statistics), svgp-ip, vff")
    p.add_argument("--collapsed-subsample", type=int, default=2000,
                   help="rows of the MAP fit that fixes spherical-collapsed's map (s, b)")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    if args.quick:
        if args.datasets == ",".join(UCI):
            args.datasets = "kin8nm,power-plant"
        args.max_features, args.epochs, args.collapsed_subsample = 120, 2, 300
        args.airline_n, args.airline_degree, args.maxiter, args.cost_degrees = 20_000, 2, 50, "1,2"
        args.repeats, args.airline_svgp_steps = 3, 20
    args.cost_degrees = [int(v) for v in str(args.cost_degrees).split(",")]
    args.cost_methods = [m for m in args.cost_methods.split(",") if m]
    args.methods = [m for m in args.methods.split(",") if m]
    if "svgp-ip" not in args.methods:
        p.error("--methods needs svgp-ip: part (a) reports every method against it")
    machine = harness.setup(args)
    from ppl_sparsegp.datasets import data_dir

    parts = set(args.parts.split(","))
    result = {**machine, "settings": {k: getattr(args, k) for k in ("datasets", "split", "max_features", "epochs",
                                                                      "batch", "lr", "airline_n", "airline_degree",
                                                                      "maxiter", "cost_degrees")}}
    if "a" in parts:
        root = data_dir(args.data_dir)
        rows = []
        for name in [d for d in args.datasets.split(",") if d]:
            for method in args.methods:
                r = run_uci(name, method, args, root)
                rows.append(r)
                print(f"{name} {method} M={r['M']}: RMSE {r['rmse']:.4f} NLPD {r['nlpd']:.3f} "
                      f"{r.get('epoch_s', float('nan')):.2f} s/epoch, fit {r['fit_s']:.1f} s (load {r['load']:.1f})",
                      flush=True)
        for r in rows:
            ip = next(q for q in rows if q["dataset"] == r["dataset"] and q["method"] == "svgp-ip")
            r["epoch_ratio_to_ip"] = r["epoch_s"] / ip["epoch_s"] if "epoch_s" in r else None
            r["fit_ratio_to_ip"] = r["fit_s"] / ip["fit_s"]
            r["nlpd_minus_ip"] = r["nlpd"] - ip["nlpd"]
        result["uci"] = rows
        print()
        print(harness.table(rows, [("data set", "dataset", ""), ("N", "n_train", "d"), ("D", "D", "d"),
                                   ("method", "method", ""), ("M", "M", "d"), ("RMSE", "rmse", ".4f"),
                                   ("NLPD", "nlpd", ".3f"), ("ΔNLPD vs IP", "nlpd_minus_ip", "+.3f"),
                                   ("s/epoch", "epoch_s", ".3f"), ("× IP time", "epoch_ratio_to_ip", ".2f"),
                                   ("fit s", "fit_s", ".1f"), ("× IP fit", "fit_ratio_to_ip", ".2f")]))
    if "b" in parts:
        row = run_airline(args)
        import json
        from pathlib import Path

        stored = Path(__file__).parent / "results" / "vff_scaling.json"
        if stored.exists():
            vff = [r for r in json.loads(stored.read_text())["rows"] if r["n_train"] == row["n_train"]]
            if vff:
                row["vff_stored"] = {k: vff[0][k] for k in ("whole_fit_s", "test_mse", "test_nlpd", "num_features")}
        result["airline"] = row
        print({k: row[k] for k in row if not isinstance(row[k], list)}, flush=True)
    if "c" in parts:
        rows, slopes = run_cost(args)
        result["cost"], result["cost_slopes"] = rows, slopes
        print(harness.table(rows, [("method", "method", ""), ("L", "max_degree", "d"), ("M", "M", "d"),
                                   ("ms/step", "step_ms", ".2f"), ("compile s", "compile_s", ".1f")]))
        print("slope of log time vs log M:", slopes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    harness.Store(args.out, ["part"], resume=False).write_json(result)
    return result


if __name__ == "__main__":
    main()
