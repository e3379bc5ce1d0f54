"""The orthogonally decoupled GP: the cost of its natural-gradient step, and UCI regression at equal time.

(b) **Step cost, side by side in one process.** Per model, one SVI with
    :class:`~ppl_sparsegp.optim.NaturalGradient` (q by natural gradients, Adam(0.01) on the rest; the
    default backtracking acceptance) and one with Adam(0.01) on everything, both on
    :class:`~ppl_sparsegp.optim.AnalyticELBO` (the same loss); each ``svi.update`` jitted once (the
    compilation timed apart, and the traces counted: a state whose types change between steps would
    compile twice), then the two compiled steps called in turn, ``--repeats`` times each, every call
    blocked until ready; reported: the median ms per step and the ratio. Models: the bundled banana
    classifier (``models.banana``: Bernoulli, full q over the 529 Kronecker VFF features, 300 rows, full
    batch) and the decoupled model on kin8nm (split 0; spherical harmonic U, mean-field q, and
    ``--num-orthogonal`` inducing points V, full q; minibatches of ``--batch``).

(u) **UCI regression at equal time** (``--datasets``: kin8nm, power-plant, protein-tertiary-structure from
    ``../shared/data/uci``, split ``--split`` (0) of the standard splits; inputs and targets standardised
    with training statistics). Kernel: ``ChordalMatern(3/2)`` with LogNormal priors (those of
    ``spherical.py``; its lengthscales s and bias b learned), a Gaussian likelihood. Methods:

    * ``decoupled``: :class:`~ppl_sparsegp.OrthogonallyDecoupledGP` with U = spherical harmonics of every
      degree up to the largest with at most ``--max-features`` features (M_u = 1 782 on kin8nm, 1 716 on
      power-plant, 935 on protein), mean-field q(u), and V = ``--num-orthogonal`` (128) inducing points
      (a fixed random subset of the training inputs), full q(v_⊥);
    * ``basis``: the U-only model (the same U, no V);
    * ``svgp``: :class:`~ppl_sparsegp.SparseGP` with ``--num-inducing`` (256) inducing points (fixed random
      training inputs), full q.

    Every method: :func:`~ppl_sparsegp.engines.fit_svi` with NaturalGradient (both q's of the decoupled
    model; γ_t = max(1/(t+1), ``--gamma-floor``) with the backtracking acceptance) and Adam(``--lr``) on the
    hyperparameters, random minibatches of ``--batch`` rows, for the number of steps that fill
    ``--budget`` seconds (the steady-state step time measured by a first fit of ``--probe-steps`` steps,
    compilation excluded): equal wall time for all three. Reported: epochs done, training seconds
    (compilation apart), seconds per epoch, test RMSE (original units), NLPD, the sd of the test z-scores
    (1 when calibrated; above 1: over-confident) and the coverage of the 90 % predictive interval.

    ``--basis activation``: U = ``--activation-features`` (1 000) learnable erf activation features
    (:class:`~ppl_sparsegp.ActivationFeatures`, Gegenbauer series to degree 20; their Kuu is dense, so the
    step costs O(M_u³)) in place of the spherical harmonics, for the decoupled and U-only models.

(c) **Classification at equal time**: scikit-learn's 8×8 digits (bundled with it; 1 200 training and 597
    test images, 64 standardised pixels, 10 classes), 10 latent GPs with a RobustMax likelihood, the same
    three methods, kernel and optimisers as (u); U's spherical degree the largest with at most
    ``--class-max-features`` (2 300: degree 2, M_u = 2 210). Reported: epochs, seconds per epoch, test
    error and NLPD (mean negative log predictive probability of the true class).

``python -m inference.benchmarks.decoupled [--quick] [--parts b,u,c] [--datasets a,b] [--basis B] [--budget S]``
stores every row (``results/decoupled.jsonl``) and writes ``results/decoupled.json`` and Markdown tables.
``--quick``: small features, banana with 3 frequencies, kin8nm only (2 000 training rows), 2-second budgets.

References:
    1. Salimbeni, Cheng, Boots, Deisenroth (2018), Orthogonally decoupled variational Gaussian processes.
    2. Shi, Titsias, Mnih (2020), Sparse orthogonal variational inference for Gaussian processes.
    3. Tiao, Dutordoir, Picheny (2023), Spherical inducing features for orthogonally-decoupled GPs.
"""
from __future__ import annotations

import math
import os

from inference.benchmarks import harness

UCI = ("kin8nm", "power-plant", "protein-tertiary-structure")
METHODS = ("decoupled", "basis", "svgp")
Z_90 = 1.6448536269514722  # the 95 % quantile of N(0, 1): |z| <= Z_90 is the 90 % interval


def _kernel(D):
    import jax.numpy as jnp
    import numpyro.distributions as dist

    from ppl_sparsegp import ChordalMatern

    return ChordalMatern(1.5, variance=dist.LogNormal(0.0, 1.0),
                         lengthscale=dist.LogNormal(jnp.full(D, math.log(math.sqrt(D))), 1.0).to_event(1),
                         bias=dist.LogNormal(0.0, 1.0), chordal_lengthscale=dist.LogNormal(0.0, 1.0))


def basis_features(D, args, max_features=None):
    """U for inputs of D columns: spherical harmonics of every degree up to the largest with at most
    ``max_features`` (``--max-features``) features, or ``--activation-features`` learnable erf activation
    features (``--basis activation``; their Kuu is dense: O(M_u³) per step)."""
    from inference.benchmarks.spherical import spherical_degree
    from ppl_sparsegp import ActivationFeatures, SphericalHarmonicFeatures

    if args.basis == "activation":
        # the series to degree 20 (the class default) with a 1e-3 tail tolerance: from_kernel's degree (7 at the
        # prior's 5 % quantile) stopped resolving the series once a fit moved the chordal lengthscale down
        import jax
        import numpy as np

        from ppl_sparsegp import Param

        V = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (args.activation_features, D + 1)))
        return ActivationFeatures(Param(V / np.linalg.norm(V, axis=1, keepdims=True)), "erf", 20, tolerance=1e-3)
    return SphericalHarmonicFeatures(D, spherical_degree(D, max_features or args.max_features))


def build(method, X, args, seed=0, likelihood=None, max_features=None):
    """The approximation of ``method`` for inputs X (N, D) (module docstring); a Gaussian likelihood unless
    ``likelihood`` is given."""
    import jax.numpy as jnp
    import numpy as np
    import numpyro.distributions as dist

    from ppl_sparsegp import Gaussian, InducingPoints, OrthogonallyDecoupledGP, SparseGP

    D = X.shape[1]
    lik = Gaussian(variance=dist.LogNormal(math.log(0.1), 1.0)) if likelihood is None else likelihood
    rng = np.random.default_rng(seed)

    def points(M):
        return InducingPoints(jnp.asarray(X[rng.choice(len(X), min(M, len(X)), replace=False)]))

    if method == "svgp":
        return SparseGP(points(args.num_inducing), _kernel(D), lik)
    U = basis_features(D, args, max_features)
    return OrthogonallyDecoupledGP(U, points(args.num_orthogonal) if method == "decoupled" else None, _kernel(D), lik)


def natural_gradient(gp, args, *, minibatches):
    import numpyro

    from ppl_sparsegp.optim import NaturalGradient, gamma_schedule

    if not minibatches:
        return NaturalGradient(gp, numpyro.optim.Adam(args.lr))  # the default: γ₀ with the line search
    return NaturalGradient(gp, numpyro.optim.Adam(args.lr), line_search=True,
                           gamma=gamma_schedule(peak=1.0, ramp_steps=0, floor=args.gamma_floor))


# --- (b) step cost ----------------------------------------------------------------------------------------------
def step_cost(name, gp, X, y, args, *, batch_size=None):
    """Median ms of the natural-gradient and the Adam step of ``gp``, interleaved (module docstring)."""
    import jax
    import numpy as np
    import numpyro
    from numpyro.infer import SVI

    from ppl_sparsegp.optim import AnalyticELBO

    kwargs = {} if batch_size is None else {"batch_size": batch_size}
    runs = {}
    for opt in ("natgrad", "adam"):
        optim = natural_gradient(gp, args, minibatches=batch_size is not None) if opt == "natgrad" else \
            numpyro.optim.Adam(args.lr)
        svi = SVI(gp.model, gp.guide, optim, AnalyticELBO(gp))
        state = svi.init(jax.random.PRNGKey(0), X, y, **kwargs)
        traces = [0]

        def update(state, X, y, svi=svi, traces=traces):
            traces[0] += 1
            return svi.update(state, X, y, **kwargs)

        fn = jax.jit(update)
        with harness.clock() as c:
            state = jax.block_until_ready(fn(state, X, y)[0])
        state = jax.block_until_ready(fn(state, X, y)[0])  # a second call: compiles again if the state's types moved
        runs[opt] = {"fn": fn, "state": state, "compile_s": c.wall, "traces": traces, "times": []}
    for _ in range(args.repeats):
        for r in runs.values():
            with harness.clock() as c:
                r["state"] = jax.block_until_ready(r["fn"](r["state"], X, y)[0])
            r["times"].append(c.wall)
    row = {"part": "b", "model": name, "n": int(X.shape[0]), "batch": batch_size, "repeats": args.repeats,
           "load": os.getloadavg()[0]}
    for opt, r in runs.items():
        row.update({f"{opt}_ms": 1e3 * float(np.median(r["times"])), f"{opt}_compile_s": r["compile_s"],
                    f"{opt}_compilations": r["traces"][0]})
    row["ratio"] = row["natgrad_ms"] / row["adam_ms"]
    return row


def run_step_costs(args, root):
    import argparse

    import jax.numpy as jnp

    from models import banana
    from ppl_sparsegp.datasets import load_uci, standardise

    spec = banana.build(argparse.Namespace(num_frequencies=3 if args.quick else 12, q_cov="full"))
    rows = [step_cost("banana SparseGP, full q (VFF)", spec.gp, spec.X, spec.y, args)]
    rows[0]["M"] = int(spec.gp.feature.num_features)
    split = load_uci("kin8nm", args.split, root=root)
    X, y, _, _, _ = standardise(split.X_train, split.y_train, split.X_test, split.y_test)
    gp = build("decoupled", X, args)
    row = step_cost("kin8nm decoupled (U mean field, V full)", gp, jnp.asarray(X), jnp.asarray(y), args,
                    batch_size=args.batch)
    row["M"] = f"{int(gp.basis.num_features)} + {args.num_orthogonal}"
    return rows + [row]


# --- (u) UCI at equal time ---------------------------------------------------------------------------------------
def calibration(mean, var, y):
    """(z-score sd, 90 % coverage) of Gaussian predictives (N,) at targets y (N,)."""
    import numpy as np

    z = (np.asarray(y) - np.asarray(mean)) / np.sqrt(np.asarray(var))
    return float(np.std(z)), float(np.mean(np.abs(z) <= Z_90))


def fit_for(gp, X, y, args, num_steps):
    """``fit_svi`` of ``gp`` for ``num_steps`` steps: (params, wall seconds, compile seconds)."""
    from ppl_sparsegp.engines import fit_svi
    from ppl_sparsegp.optim import AnalyticELBO

    with harness.clock() as c:
        result, _ = fit_svi(gp, X, y, num_steps=num_steps, rng_key=0, optim=natural_gradient(gp, args,
                            minibatches=True), elbo=AnalyticELBO(gp), model_kwargs={"batch_size": args.batch},
                            block_size=min(num_steps, 100), divergence_factor=None)
    return result.params, c.wall, c.compile


def fit_budget(gp, X, y, args):
    """Fit ``gp`` for the steps that fill ``--budget`` training seconds (the steady-state step time of a
    first fit of ``--probe-steps`` steps, compilation excluded): (params, steps, training s, compile s)."""
    _, probe_s, probe_compile = fit_for(gp, X, y, args, args.probe_steps)
    step_s = max(probe_s - probe_compile, 1e-6) / args.probe_steps
    num_steps = max(1, int(args.budget / step_s))
    params, wall, compile_s = fit_for(gp, X, y, args, num_steps)
    return params, num_steps, wall - compile_s, compile_s


def _features_label(gp, method, args):
    """M of a row: SVGP's inducing points, U's size, or "M_u + M_v"."""
    if method == "svgp":
        return str(args.num_inducing)
    return str(gp.basis.num_features) if method == "basis" else f"{gp.basis.num_features} + {args.num_orthogonal}"


def _predict_batched(gp, params, Xs, keys=("y_mean", "y_var")):
    """``gp.predict`` at the rows Xs in jitted batches of 2 048, as NumPy arrays."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np

    predict = jax.jit(lambda Xc: gp.predict(Xc, params=params))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: np.concatenate([np.asarray(predict(jnp.asarray(Xs[i:i + 2048]))[k]) for i in
                                   range(0, len(Xs), 2048)]) for k in keys}


def run_uci(name, method, args, root):
    """One row of part (u): ``method`` on ``name`` for ``--budget`` training seconds."""
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp.datasets import load_uci, standardise as scale
    from ppl_sparsegp.diagnostics import nlpd

    split = load_uci(name, args.split, root=root)
    Xtr, ytr = split.X_train, split.y_train
    if args.max_train and len(ytr) > args.max_train:
        idx = np.random.default_rng(0).choice(len(ytr), args.max_train, replace=False)
        Xtr, ytr = Xtr[idx], ytr[idx]
    X, y, Xs, ys, scaler = scale(Xtr, ytr, split.X_test, split.y_test)
    X, y = jnp.asarray(X), jnp.asarray(y)
    gp = build(method, np.asarray(X), args)
    params, num_steps, train_s, compile_s = fit_budget(gp, X, y, args)
    out = _predict_batched(gp, params, Xs)
    sd_z, coverage = calibration(out["y_mean"], out["y_var"], ys)
    epochs = num_steps * args.batch / len(y)
    return {"part": "u", "dataset": name, "method": method, "basis": args.basis if method != "svgp" else None,
            "M": _features_label(gp, method, args), "n_train": len(y), "D": int(X.shape[1]),
            "split": args.split, "steps": num_steps, "epochs": epochs, "train_s": train_s, "compile_s": compile_s,
            "s_per_epoch": train_s / epochs,
            "rmse": float(np.sqrt(np.mean((np.asarray(out["y_mean"]) - ys) ** 2))) * scaler["y_sd"],
            "nlpd": nlpd(ys, out["y_mean"], out["y_var"], y_scale=scaler["y_sd"]), "z_sd": sd_z,
            "coverage90": coverage, "load": os.getloadavg()[0]}


# --- (c) classification at equal time ----------------------------------------------------------------------------
def digits_split(seed=0, n_train=1200):
    """scikit-learn's 8×8 digits (1 797 images, 64 pixels, 10 classes; bundled with scikit-learn, nothing is
    downloaded): a fixed random split of ``n_train`` training images and the rest for testing, every pixel
    standardised with the training statistics (a constant pixel keeps sd 1)."""
    import numpy as np
    from sklearn.datasets import load_digits

    data = load_digits()
    X, y = data.data.astype(float), data.target.astype(int)
    idx = np.random.default_rng(seed).permutation(len(y))
    tr, te = idx[:n_train], idx[n_train:]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd[sd == 0] = 1.0
    return (X[tr] - mu) / sd, y[tr], (X[te] - mu) / sd, y[te]


def run_digits(method, args):
    """One row of part (c): ``method`` on the digits (10 latent GPs, RobustMax) for ``--budget`` seconds."""
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp import RobustMax

    X, y, Xs, ys = digits_split()
    gp = build(method, X, args, likelihood=RobustMax(10), max_features=args.class_max_features)
    params, num_steps, train_s, compile_s = fit_budget(gp, jnp.asarray(X), jnp.asarray(y), args)
    p = _predict_batched(gp, params, Xs, keys=("y_mean",))["y_mean"]  # (N, 10) class probabilities
    p_true = np.clip(p[np.arange(len(ys)), ys], 1e-300, None)
    epochs = num_steps * args.batch / len(y)
    return {"part": "c", "dataset": "digits", "method": method, "basis": args.basis if method != "svgp" else None,
            "M": _features_label(gp, method, args), "n_train": len(y), "D": int(X.shape[1]), "steps": num_steps,
            "epochs": epochs, "train_s": train_s, "compile_s": compile_s, "s_per_epoch": train_s / epochs,
            "error": float(np.mean(np.argmax(p, 1) != ys)), "nlpd": float(-np.mean(np.log(p_true))),
            "load": os.getloadavg()[0]}


def markdown(rows):
    b = [r for r in rows if r["part"] == "b"]
    u = [r for r in rows if r["part"] == "u"]
    c = [r for r in rows if r["part"] == "c"]
    out = []
    if b:
        out.append(harness.table(b, [
            ("model", "model", "s"), ("M", "M", lambda v: str(v)),
            ("rows per step", lambda r: r["batch"] or r["n"], "d"),
            ("natgrad ms", "natgrad_ms", ".1f"), ("Adam ms", "adam_ms", ".1f"), ("ratio", "ratio", ".2f"),
            ("compile s (natgrad / Adam)",
             lambda r: f"{r['natgrad_compile_s']:.1f} / {r['adam_compile_s']:.1f}", "s"),
            ("compilations", lambda r: f"{r['natgrad_compilations']} / {r['adam_compilations']}", "s")]))
    if u:
        out.append(harness.table(u, [
            ("data set", "dataset", "s"), ("method", "method", "s"), ("M", "M", "s"), ("N", "n_train", "d"),
            ("epochs", "epochs", ".1f"), ("s / epoch", "s_per_epoch", ".3f"), ("RMSE", "rmse", ".3f"),
            ("NLPD", "nlpd", ".3f"), ("z sd", "z_sd", ".2f"), ("90 % coverage", "coverage90", ".3f")]))
    if c:
        out.append(harness.table(c, [
            ("data set", "dataset", "s"), ("method", "method", "s"), ("M", "M", "s"), ("N", "n_train", "d"),
            ("epochs", "epochs", ".1f"), ("s / epoch", "s_per_epoch", ".3f"), ("error", "error", ".3f"),
            ("NLPD", "nlpd", ".3f")]))
    return "\n\n".join(out)


def main(argv=None):
    p = harness.parser("decoupled", __doc__)
    p.add_argument("--parts", default="b,u,c", help="comma list of b (step cost), u (UCI), c (digits)")
    p.add_argument("--datasets", default=None, help="comma list (default: the three; --quick: kin8nm)")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--split", type=int, default=0, help="the standard split (default 0)")
    p.add_argument("--data-dir", default=None, help="the data directory (default: ../shared/data)")
    p.add_argument("--budget", type=float, default=None, help="training seconds per fit (default 90; --quick 2)")
    p.add_argument("--probe-steps", type=int, default=None, help="steps that measure the step time (default 40)")
    p.add_argument("--max-features", type=int, default=None, help="largest M_u (default 2000; --quick 60)")
    p.add_argument("--basis", choices=("spherical", "activation"), default="spherical",
                   help="U of the decoupled and U-only models (default spherical harmonics)")
    p.add_argument("--activation-features", type=int, default=None,
                   help="M_u of --basis activation (default 1000; --quick 40)")
    p.add_argument("--class-max-features", type=int, default=None,
                   help="largest spherical M_u of part (c) (default 2300: degree 2 in 64 dimensions; --quick 70)")
    p.add_argument("--num-orthogonal", type=int, default=None, help="V's inducing points (default 128)")
    p.add_argument("--num-inducing", type=int, default=None, help="SVGP's inducing points (default 256)")
    p.add_argument("--max-train", type=int, default=None, help="subsample the training rows (default: all)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--gamma-floor", type=float, default=0.02)
    p.add_argument("--repeats", type=int, default=None, help="timed steps per optimiser, part (b) (default 30)")
    args = p.parse_args(argv)
    q = args.quick
    for name, full, quick in (("budget", 90.0, 2.0), ("probe_steps", 40, 5), ("max_features", 2000, 60),
                              ("num_orthogonal", 128, 16), ("num_inducing", 256, 32), ("repeats", 30, 3),
                              ("max_train", 0, 2000), ("activation_features", 1000, 40),
                              ("class_max_features", 2300, 70)):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    machine = harness.setup(args, one_thread=True)
    datasets = args.datasets.split(",") if args.datasets else (["kin8nm"] if q else list(UCI))
    settings = {k: getattr(args, k) for k in ("quick", "split", "budget", "max_features", "num_orthogonal",
                                              "num_inducing", "max_train", "batch", "lr", "gamma_floor")}
    if args.basis != "spherical":  # the settings of the spherical runs stored before the option existed
        settings.update(basis=args.basis, activation_features=args.activation_features)
    if "c" in args.parts.split(","):
        settings["class_max_features"] = args.class_max_features
    store = harness.Store(args.out, ["part", "model", "dataset", "method"], settings=settings, resume=args.resume,
                          merge=args.merge)
    root = args.data_dir
    parts = args.parts.split(",")
    if "b" in parts:
        for row in run_step_costs(args, root):
            store.add(row)
            print(f"step cost {row['model']}: natgrad {row['natgrad_ms']:.1f} ms, Adam {row['adam_ms']:.1f} ms, "
                  f"ratio {row['ratio']:.2f}", flush=True)
    if "u" in parts:
        for name in datasets:
            for method in args.methods.split(","):
                if store.done("u", None, name, method):
                    continue
                row = store.add(run_uci(name, method, args, root))
                print(f"{name} {method}: {row['epochs']:.1f} epochs, NLPD {row['nlpd']:.3f}, RMSE {row['rmse']:.3f}, "
                      f"z sd {row['z_sd']:.2f}, coverage {row['coverage90']:.3f}", flush=True)
    if "c" in parts:
        for method in args.methods.split(","):
            if store.done("c", None, "digits", method):
                continue
            row = store.add(run_digits(method, args))
            print(f"digits {method}: {row['epochs']:.1f} epochs, error {row['error']:.3f}, NLPD {row['nlpd']:.3f}",
                  flush=True)
    rows = store.rows
    print(markdown(rows))
    store.write_json({"machine": machine, "settings": settings, "rows": rows})
    return rows


if __name__ == "__main__":
    main()
