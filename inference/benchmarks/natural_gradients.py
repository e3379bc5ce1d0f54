"""Natural-gradient steps for q(u) against Adam (issue 42), in one run, on the shared harness.

(a) **UCI regression** (``--datasets``: kin8nm, power-plant, energy, concrete from ``../shared/data/uci``,
    split ``--split`` of the standard 20; inputs and targets standardised with training statistics) with
    ``--features`` ``spherical`` (``SphericalHarmonicFeatures`` + ``ChordalMatern(3/2)``, every degree up to
    the largest with at most ``--max-features`` features: M = 660 for D = 8, 825 for D = 4) and
    ``inducing`` (inducing points at the same M, a fixed random subset of the training inputs, ARD squared
    exponential). Per (set, features):

    1. the starting point: MAP of every hyperparameter of ``CollapsedGP`` on ``--collapsed-subsample``
       random rows (L-BFGS); for spherical features its map (s, b) is then fixed, as in
       ``spherical.py``: the features are the same for every fit below;
    2. **collapsed**: the optimal q(u) and L-BFGS over the other hyperparameters on all rows (spherical:
       one-pass statistics): the test NLPD any q could reach with these features (the reference);
    3. **natgrad** and **adam**: ``SparseGP`` SVI from the starting point (q(u) at the prior), minibatches of
       ``--batch`` rows for adam (256, as ``spherical.py``) and ``--natgrad-batch`` for natgrad (default the
       full batch: an epoch is one step), Adam(``--lr``) on the hyperparameters; natgrad steps q(u) by
       :class:`~ppl_sparsegp.optim.NaturalGradient` (γ = ``--gamma``: default 1 on the full batch, 0.1 with
       minibatches, whose noise γ = 1 would not average: measured, N = 5 000, B = 256, fixed
       hyperparameters, the ELBO 60-190 % of the bound off after 10-20 steps at γ = 1, 2-5 % at γ = 0.1-0.2)
       on ``AnalyticELBO``, adam steps
       everything by Adam on ``TraceMeanField_ELBO`` (the library's default before issue 42). The test
       NLPD every quarter epoch, up to ``--epochs`` epochs (natgrad stops one epoch after reaching the
       target); reported: steps, epochs and seconds (training only, compilation included, evaluation
       excluded) until the NLPD is within ``--tolerance`` (0.02) of the collapsed fit's.

(b) **non-conjugate, minibatches**: Bernoulli on banana (400 rows, bundled) and on a simulated 2-D
    classification set of ``--class-n`` (10⁵) rows; Poisson on a simulated 1-D Cox process of
    ``--cox-bins`` (10⁴) bins; inducing points (M = ``--class-m``), hyperparameters fixed at the
    generating values so that both optimisers solve the same problem for q(u). Per seed (``--seeds``,
    10 from ``--first-seed``; the seed draws the minibatches and, for the simulated sets, the data): natgrad
    (``--class-gamma decay``, the default, with minibatches: ``gamma_schedule()``, 1e-4 → 0.5 over 5 steps
    then 1/(t − 3), a running mean of the minibatch steps; ``constant`` and on the full batch (banana):
    ``gamma_ramp(1e-4, 0.1, 5)``, whose constant γ = 0.1 leaves the minibatch noise in q; the PD
    safeguard) against Adam(``--class-lr``) on q(u), ``--class-steps`` steps of minibatches of
    ``--class-batch``; the exact ELBO (``SparseGP.elbo``, all rows) every
    ``--class-eval`` steps. Converged value: the best ELBO either reached; reported: the steps and
    seconds until the ELBO is within 0.1 % of it, rejected natural-gradient steps and failures
    (non-finite ELBO or params) over the seeds.

``python -m inference.benchmarks.natural_gradients [--quick] [--parts a,b] [--cpu N] [--data-dir DIR]``
writes ``results/natural_gradients.json`` and prints Markdown tables; ``--quick`` is a smoke run (small
M, two UCI sets, few steps and seeds).

References:
    1. Salimbeni, Eleftheriadis, Hensman (2018), Natural gradients in practice, AISTATS.
    2. Hensman, Fusi, Lawrence (2013), Gaussian processes for big data, UAI.
"""
from __future__ import annotations

import math
import os
import time

from inference.benchmarks import harness

UCI = ("kin8nm", "power-plant", "energy", "concrete")


# --- (a) UCI ----------------------------------------------------------------------------------------------------
def _priors(kind, D, X, M):
    """(feature, kernel template, noise template) with LogNormal priors (those of spherical.py)."""
    import jax.numpy as jnp
    import numpy as np
    import numpyro.distributions as dist

    from inference.benchmarks.spherical import spherical_degree
    from ppl_sparsegp import (
        ChordalMatern,
        Gaussian,
        InducingPoints,
        SphericalHarmonicFeatures,
        SquaredExponential,
    )

    noise = Gaussian(variance=dist.LogNormal(math.log(0.1), 1.0))
    if kind == "spherical":
        feature = SphericalHarmonicFeatures(D, spherical_degree(D, M))
        kernel = ChordalMatern(1.5, variance=dist.LogNormal(0.0, 1.0),
                               lengthscale=dist.LogNormal(jnp.full(D, math.log(math.sqrt(D))), 1.0).to_event(1),
                               bias=dist.LogNormal(0.0, 1.0), chordal_lengthscale=dist.LogNormal(0.0, 1.0))
        return feature, kernel, noise
    kernel = SquaredExponential(variance=dist.LogNormal(0.0, 1.0),
                                lengthscale=dist.LogNormal(jnp.zeros(D), 1.0).to_event(1))
    from ppl_sparsegp.features.spherical import num_harmonics

    M = sum(num_harmonics(D + 1, n) for n in range(spherical_degree(D, M) + 1))  # the spherical features' M
    Z = X[np.random.default_rng(0).choice(len(X), min(M, len(X)), replace=False)]
    return InducingPoints(jnp.asarray(Z)), kernel, noise


def reference_fit(kind, feature, kernel, noise, X, y, args):
    """Steps 1-2: (start values, the SVGP's kernel template, collapsed (m_v, S_v, kernel, noise), seconds)."""
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp import ChordalMatern, CollapsedGP
    from ppl_sparsegp.approximations.optimise import map_lbfgs
    from ppl_sparsegp.features.spherical import spherical_statistics

    with harness.clock() as c:
        idx = np.random.default_rng(1).choice(len(y), min(args.collapsed_subsample, len(y)), replace=False)
        small = CollapsedGP(feature, kernel, noise)
        v0, _ = map_lbfgs(small.model, small.hyperparameter_sites(),
                          model_args=(jnp.asarray(X[idx]), jnp.asarray(y[idx])), maxiter=args.maxiter)
        if kind == "spherical":  # the map (s, b) fixed from here on: the same features for every fit
            s, b = np.asarray(v0["kernel_lengthscale"]), float(v0["kernel_bias"])
            kernel = ChordalMatern(1.5, variance=kernel.variance, lengthscale=s, bias=b,
                                   chordal_lengthscale=kernel.chordal_lengthscale)
            v0 = {k: v for k, v in v0.items() if k not in ("kernel_lengthscale", "kernel_bias")}
            stats = spherical_statistics(feature, kernel, X, y, chunk_size=2048)
            gp = CollapsedGP(feature, kernel, noise, statistics=stats)
            values, _ = map_lbfgs(gp.model, gp.hyperparameter_sites(), init=v0, maxiter=args.maxiter)
            m_v, S_v = gp.optimal_q(values)
        else:
            gp = CollapsedGP(feature, kernel, noise)
            values, _info = map_lbfgs(gp.model, gp.hyperparameter_sites(), init=v0, maxiter=args.maxiter,
                                     model_args=(jnp.asarray(X), jnp.asarray(y)))
            m_v, S_v = gp.optimal_q(values, jnp.asarray(X), jnp.asarray(y))
    return v0, kernel, (values, m_v, S_v, gp), c.wall


def _test_nlpd(gp, feature, values, m_v, S_v, Xs, ys, y_sd):
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp import conditional
    from ppl_sparsegp.diagnostics import nlpd

    kernel, lik, _, _ = gp.components_from(values)
    m, v = conditional(feature, kernel, jnp.asarray(Xs), m_v, S_v, whiten=True)
    return nlpd(ys, np.asarray(m), np.asarray(v) + float(lik.variance), y_scale=y_sd)


def train_to_target(gp, X, y, Xs, ys, y_sd, *, optimizer, init, target, args):
    """SVI from ``init`` until the test NLPD is within the tolerance (then one more epoch, natgrad) or the
    epoch budget ends. Returns the row's fields."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import SVI, TraceMeanField_ELBO

    from ppl_sparsegp.diagnostics import nlpd
    from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient

    X, y = jnp.asarray(X), jnp.asarray(y)
    N = len(y)
    batch = args.natgrad_batch if optimizer == "natgrad" else args.batch
    B = N if batch <= 0 else min(batch, N)
    per_epoch = max(1, N // B)
    every = max(1, per_epoch // 4)
    kwargs = {} if B == N else {"batch_size": B}
    if optimizer == "natgrad":
        gamma = args.gamma if args.gamma is not None else 1.0 if B == N else 0.1
        svi = SVI(gp.model, gp.guide, NaturalGradient(gp, numpyro.optim.Adam(args.lr), gamma=gamma),
                  AnalyticELBO(gp))
    else:
        svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(args.lr), TraceMeanField_ELBO())
    state = svi.init(jax.random.PRNGKey(0), X, y, init_params=init, **kwargs)

    @jax.jit
    def advance(state, X, y):
        return jax.lax.fori_loop(0, every, lambda i, s: svi.update(s, X, y, **kwargs)[0], state)

    predict = jax.jit(lambda Xc, p: gp.predict(Xc, params=p))
    steps, seconds, trace, reached, compile_s = 0, 0.0, [], None, 0.0
    while steps < args.epochs * per_epoch:
        with harness.clock() as c:
            state = jax.block_until_ready(advance(state, X, y))
        seconds, steps, compile_s = seconds + c.wall, steps + every, compile_s + c.compile
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = predict(jnp.asarray(Xs), svi.get_params(state))
        value = nlpd(ys, out["y_mean"], out["y_var"], y_scale=y_sd)
        trace.append((steps, steps * B / N, seconds, value))
        if reached is None and value <= target:
            reached = (steps, steps * B / N, seconds)
        if reached is not None and optimizer == "natgrad" and steps * B / N >= reached[1] + 1 and steps >= 5:
            break
    row = {"optimizer": optimizer, "batch": B, "steps_per_epoch": per_epoch, "final_nlpd": trace[-1][3],
           "best_nlpd": min(t[3] for t in trace), "trace": trace, "compile_s": compile_s,
           "reached_steps": None, "reached_epochs": None, "reached_s": None,
           "epochs_run": trace[-1][1], "seconds_run": seconds}
    if reached is not None:
        row.update(reached_steps=reached[0], reached_epochs=reached[1], reached_s=reached[2])
    if optimizer == "natgrad":
        row.update(rejected=NaturalGradient.rejected_steps(state.optim_state), gamma=gamma)
    return row


def run_uci(name, kind, args, root):
    from ppl_sparsegp import SparseGP
    from ppl_sparsegp.datasets import load_uci, standardise

    split = load_uci(name, args.split, root=root)
    X, y, Xs, ys, scaler = standardise(split.X_train, split.y_train, split.X_test, split.y_test)
    D = X.shape[1]
    feature, kernel, noise = _priors(kind, D, X, args.max_features)
    v0, kernel, (values, m_v, S_v, cgp), ref_s = reference_fit(kind, feature, kernel, noise, X, y, args)
    ref = _test_nlpd(cgp, feature, values, m_v, S_v, Xs, ys, scaler["y_sd"])
    base = {"dataset": name, "features": kind, "M": int(feature.num_features), "n_train": len(y), "D": D,
            "collapsed_nlpd": ref, "collapsed_s": ref_s, "target": ref + args.tolerance}
    rows = []
    for optimizer in args.optimizers.split(","):
        gp = SparseGP(feature, kernel, noise)
        init = {f"{k}_map": v for k, v in v0.items()}
        row = train_to_target(gp, X, y, Xs, ys, scaler["y_sd"], optimizer=optimizer, init=init,
                              target=ref + args.tolerance, args=args)
        rows.append({**base, **row, "load": os.getloadavg()[0]})
    return rows


# --- (b) non-conjugate likelihoods, minibatches -------------------------------------------------------------------
def classification_task(task, seed, args):
    """(X, y, SparseGP) of one task; the hyperparameters fixed at the generating values."""
    import numpy as np

    from ppl_sparsegp import (
        Bernoulli,
        InducingPoints,
        Poisson,
        SparseGP,
        SquaredExponential,
    )
    from ppl_sparsegp.datasets import load_banana

    rng = np.random.default_rng(seed)
    M = args.class_m
    if task == "banana":
        X, y = load_banana()
        kernel = SquaredExponential(variance=3.0, lengthscale=0.6)
        Z = X[np.random.default_rng(0).choice(len(X), min(M, len(X)), replace=False)]
        return X, y, SparseGP(InducingPoints(Z), kernel, Bernoulli())
    if task == "classification-2d":
        n = args.class_n
        X = rng.uniform(-3, 3, (n, 2))
        f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) * 2.5
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-f))).astype(float)
        g = np.linspace(-3, 3, round(math.sqrt(M)))
        Z = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
        return X, y, SparseGP(InducingPoints(Z), SquaredExponential(variance=2.0, lengthscale=0.8), Bernoulli())
    n = args.cox_bins  # a 1-D Cox process on [0, 10], counts per bin
    X = np.linspace(0, 10, n)[:, None]
    rate = np.exp(1.0 + np.sin(X[:, 0]) + 0.5 * np.sin(3 * X[:, 0]))
    y = rng.poisson(rate).astype(float)
    Z = np.linspace(0, 10, M)[:, None]
    return X, y, SparseGP(InducingPoints(Z), SquaredExponential(variance=1.0, lengthscale=0.7), Poisson())


def run_nonconjugate(task, seed, optimizer, args):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    from numpyro.infer import SVI

    from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient, gamma_ramp, gamma_schedule

    X, y, gp = classification_task(task, seed, args)
    X, y = jnp.asarray(X), jnp.asarray(y)
    B = min(args.class_batch, len(y))
    kwargs = {} if B == len(y) else {"batch_size": B}
    decay = args.class_gamma == "decay" and B < len(y)  # the full batch has no noise to average
    gamma = gamma_schedule() if decay else gamma_ramp(1e-4, 0.1, 5)
    optim = NaturalGradient(gp, gamma=gamma) if optimizer == "natgrad" else numpyro.optim.Adam(args.class_lr)
    svi = SVI(gp.model, gp.guide, optim, AnalyticELBO(gp))  # the same loss for both: the step differs
    state = svi.init(jax.random.PRNGKey(seed), X, y, **kwargs)
    every = args.class_eval

    @jax.jit
    def advance(state, X, y):
        return jax.lax.fori_loop(0, every, lambda i, s: svi.update(s, X, y, **kwargs)[0], state)

    elbo = jax.jit(lambda p, X, y: gp.elbo(p, X, y))
    trace, seconds, failed = [], 0.0, False
    for k in range(args.class_steps // every):
        t0 = time.perf_counter()
        state = jax.block_until_ready(advance(state, X, y))
        seconds += time.perf_counter() - t0
        value = float(elbo(svi.get_params(state), X, y))
        if not np.isfinite(value):
            failed = True
            break
        trace.append(((k + 1) * every, seconds, value))
    row = {"task": task, "seed": seed, "optimizer": optimizer, "n": len(y), "M": args.class_m, "batch": B,
           "trace": trace, "failed": failed}
    if optimizer == "natgrad":
        row.update(rejected=NaturalGradient.rejected_steps(state.optim_state), gamma="decay" if decay else "constant")
    return row


def summarise_nonconjugate(rows):
    """Per task: steps/seconds to within 0.1 % of the best ELBO reached (per seed), failures."""
    import numpy as np

    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        per = {}
        for seed in dict.fromkeys(r["seed"] for r in rows if r["task"] == task):
            pair = {r["optimizer"]: r for r in rows if r["task"] == task and r["seed"] == seed}
            best = max(t[2] for r in pair.values() for t in r["trace"]) if any(r["trace"] for r in pair.values()) \
                else float("nan")
            for opt, r in pair.items():
                hit = next((t for t in r["trace"] if t[2] >= best - 1e-3 * abs(best)), None)
                per.setdefault(opt, []).append((hit, r))
        for opt, items in per.items():
            hits = [h for h, _ in items if h is not None]
            out.append({"task": task, "optimizer": opt, "n": items[0][1]["n"], "seeds": len(items),
                        "converged": len(hits), "failures": sum(r["failed"] for _, r in items),
                        "rejected": sum(r.get("rejected", 0) for _, r in items),
                        "median_steps": float(np.median([h[0] for h in hits])) if hits else None,
                        "median_s": float(np.median([h[1] for h in hits])) if hits else None,
                        "final_elbo": float(np.median([r["trace"][-1][2] for _, r in items if r["trace"]]))})
    return out


def main(argv=None):
    p = harness.parser("natural_gradients", __doc__)
    p.add_argument("--parts", default="a,b")
    p.add_argument("--data-dir", default=None, help="the data folder (default ../shared/data)")
    p.add_argument("--datasets", default=",".join(UCI))
    p.add_argument("--features", default="spherical,inducing")
    p.add_argument("--optimizers", default="natgrad,adam")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--max-features", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=256, help="Adam's minibatch rows (0: the full batch)")
    p.add_argument("--natgrad-batch", type=int, default=0, help="natural gradients' minibatch rows (0, default: "
                   "the full batch, where one step with γ = 1 reaches the optimal q)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--gamma", type=float, default=None, help="natural-gradient step size (default: 1 on the "
                   "full batch, 0.1 with minibatches)")
    p.add_argument("--tolerance", type=float, default=0.02)
    p.add_argument("--collapsed-subsample", type=int, default=2000)
    p.add_argument("--maxiter", type=int, default=200)
    p.add_argument("--tasks", default="banana,classification-2d,cox")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0, help="(b) seeds first-seed .. first-seed + seeds - 1")
    p.add_argument("--class-gamma", choices=("decay", "constant"), default="decay",
                   help="(b) natgrad's γ: decay (gamma_schedule(), default) or constant (0.1 after the ramp)")
    p.add_argument("--class-n", type=int, default=100_000)
    p.add_argument("--cox-bins", type=int, default=10_000)
    p.add_argument("--class-m", type=int, default=64)
    p.add_argument("--class-batch", type=int, default=1024)
    p.add_argument("--class-steps", type=int, default=2000)
    p.add_argument("--class-eval", type=int, default=20)
    p.add_argument("--class-lr", type=float, default=0.01)
    args = p.parse_args(argv)
    if args.quick:  # small sizes, for the settings the command line leaves at their defaults
        small = {"datasets": "concrete,energy", "max_features": 60, "epochs": 4, "collapsed_subsample": 300,
                 "maxiter": 50, "seeds": 2, "class_n": 5000, "cox_bins": 2000, "class_m": 16,
                 "class_steps": 200, "class_eval": 20}
        for k, v in small.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    machine = harness.setup(args)
    parts = args.parts.split(",")
    result = {"machine": machine, "settings": {k: v for k, v in vars(args).items() if k not in ("out", "merge")},
              "load_before": os.getloadavg()[0]}
    if "a" in parts:
        rows = []
        for name in args.datasets.split(","):
            for kind in args.features.split(","):
                rows += run_uci(name, kind, args, args.data_dir)
                print(harness.table(rows[-2:], _A_COLUMNS), flush=True)
        result["uci"] = rows
        print("\n(a) UCI: test NLPD within", args.tolerance, "of the collapsed fit with the same features\n")
        print(harness.table(rows, _A_COLUMNS))
    if "b" in parts:
        rows = [run_nonconjugate(task, seed, opt, args) for task in args.tasks.split(",")
                for seed in range(args.first_seed, args.first_seed + args.seeds) for opt in ("natgrad", "adam")]
        result["nonconjugate_runs"] = rows
        result["nonconjugate"] = summarise_nonconjugate(rows)
        print("\n(b) non-conjugate: steps to within 0.1 % of the best ELBO reached (median over converged seeds)\n")
        print(harness.table(result["nonconjugate"], _B_COLUMNS))
    result["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    harness.Store(args.out, ["part"], resume=False).write_json(result)
    return result


_A_COLUMNS = [("set", "dataset", ""), ("features", "features", ""), ("M", "M", "d"), ("N", "n_train", "d"),
              ("optimiser", "optimizer", ""), ("batch", "batch", "d"), ("collapsed NLPD", "collapsed_nlpd", ".3f"),
              ("best NLPD", "best_nlpd", ".3f"), ("steps to target", "reached_steps", "d"),
              ("epochs to target", "reached_epochs", ".2f"), ("s to target", "reached_s", ".1f"),
              ("epochs run", "epochs_run", ".2f")]
_B_COLUMNS = [("task", "task", ""), ("N", "n", "d"), ("optimiser", "optimizer", ""), ("seeds", "seeds", "d"),
              ("converged", "converged", "d"), ("failures", "failures", "d"), ("rejected steps", "rejected", "d"),
              ("median steps", "median_steps", ".0f"), ("median s", "median_s", ".2f"),
              ("final ELBO", "final_elbo", ".2f")]

if __name__ == "__main__":
    main()
