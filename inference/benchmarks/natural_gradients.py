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
    3. **natgrad** and **adam**: ``SparseGP`` SVI from the starting point (q(u) at the prior). **natgrad**
       (the default): minibatches of ``--natgrad-batch`` rows (default min(256, max(32, N // 16)): 256 on
       kin8nm and power-plant; on the small sets, energy and concrete, at least 16 hyperparameter steps per
       epoch: with 256 rows concrete's inducing points needed 1.66 epochs, with 64 0.97), the rows of each
       epoch one permutation
       (N // B disjoint minibatches, the last N mod B rows left out; an epoch is one pass over the rows);
       per step :class:`~ppl_sparsegp.optim.NaturalGradient` on q(u) with γ_t = max(1/(t+1),
       ``--gamma-floor``) (default floor 0) on the minibatch's ``AnalyticELBO`` (data term scaled by N/B),
       then one Adam(``--natgrad-lr``, default ``--lr`` = 0.01) step on the hyperparameters at the new q (two
       gradients of the minibatch per step). Why this schedule: for a Gaussian likelihood a step with γ
       moves q's natural parameters to (1 − γ)θ + γθ̂_B, θ̂_B the optimum for the step's minibatch alone, so
       with γ_t = 1/(t+1) θ is the mean of the minibatch optima so far, and after one pass over disjoint
       minibatches it *is* the optimum of all rows at fixed hyperparameters (exactly: tested), while the
       hyperparameters get N/B Adam steps per epoch instead of one. A constant γ keeps the last minibatches'
       noise (γ = 1: q is one minibatch's optimum); ``--natgrad-batch 0`` is the full batch with γ = 1 (one
       step per epoch: q optimal, one Adam step per epoch). ``--gamma`` sets a constant γ. **adam**: Adam
       (``--lr``) on everything, ``TraceMeanField_ELBO`` (the library's default before issue 42), random
       minibatches of ``--batch`` (256, as ``spherical.py``). The test NLPD every quarter epoch, up to
       ``--epochs`` epochs (natgrad stops one epoch after reaching the target); reported: steps, epochs
       and seconds (training only, compilation included, evaluation excluded) until the NLPD is within
       ``--tolerance`` (0.02) of the collapsed fit's.

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

(c) **airline size** (``--airline-n``, default 3 952 942 training rows: ``spherical.py`` part (b)'s
    synthetic set, split, features (degree ``--airline-degree`` = 3: M = 210) and priors): the collapsed fit
    (:func:`~ppl_sparsegp.fit_spherical`: the map (s, b) from a 5 000-row MAP, one-pass statistics, L-BFGS)
    against natural-gradient SVI (as natgrad above: γ_t = 1/(t+1), Adam on the rest) from fit_spherical's
    starting point (its stage-1 subsample MAP, recomputed: ``start_matches_fit`` checks the map is the
    fit's) for ONE epoch of minibatches of ``--airline-batch`` (1 024); test MSE of both on the test third
    (target: SVI within 0.005 of the collapsed fit), seconds of each (SVI: training only, compilation
    included), the test MSE on the first 10⁵ test rows every quarter epoch.

``python -m inference.benchmarks.natural_gradients [--quick] [--parts a,b,c] [--cpu N] [--data-dir DIR]``
writes ``results/natural_gradients.json`` (rewritten after every (set, features) of part a) and prints
Markdown tables; ``--quick`` is a smoke run (small M, two UCI sets, few steps and seeds, 20 000 airline
rows).

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
    from ppl_sparsegp.approximations.map_estimate import map_lbfgs
    from ppl_sparsegp.features.spherical import spherical_statistics

    with harness.clock() as c:
        idx = np.random.default_rng(1).choice(len(y), min(args.collapsed_subsample, len(y)), replace=False)
        small = CollapsedGP(feature, kernel, noise)
        v0, _ = map_lbfgs(small.model, small.hyperparameter_sites(),
                          model_args=(jnp.asarray(X[idx]), jnp.asarray(y[idx])), num_steps=args.maxiter)
        if kind == "spherical":  # the map (s, b) fixed from here on: the same features for every fit
            s, b = np.asarray(v0["kernel_lengthscale"]), float(v0["kernel_bias"])
            kernel = ChordalMatern(1.5, variance=kernel.variance, lengthscale=s, bias=b,
                                   chordal_lengthscale=kernel.chordal_lengthscale)
            v0 = {k: v for k, v in v0.items() if k not in ("kernel_lengthscale", "kernel_bias")}
            stats = spherical_statistics(feature, kernel, X, y, chunk_size=2048)
            gp = CollapsedGP(feature, kernel, noise, statistics=stats)
            values, _ = map_lbfgs(gp.model, gp.hyperparameter_sites(), init=v0, num_steps=args.maxiter)
            m_v, S_v = gp.optimal_q(values)
        else:
            gp = CollapsedGP(feature, kernel, noise)
            values, _info = map_lbfgs(gp.model, gp.hyperparameter_sites(), init=v0, num_steps=args.maxiter,
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


def natgrad_gamma(gamma, floor, *, full_batch):
    """The natural-gradient step size: ``gamma`` if given; else 1 on the full batch (one step reaches the
    optimal q); else, with minibatches, :math:`\\gamma_t = \\max(1/(t+1), \\gamma_{floor})`
    (``gamma_schedule(peak=1, ramp_steps=0, floor=floor)``).

    For a Gaussian likelihood a step with γ moves q's natural parameters to (1 − γ)θ + γθ̂_B, θ̂_B the
    optimum for the step's minibatch (its data term scaled by N/B); with γ_t = 1/(t+1), θ_t is the mean of
    the t + 1 minibatch optima so far (the running average of the data term: its noise falls as 1/t, and
    after one epoch q is what one pass over all rows gives), and the floor keeps forgetting the minibatches
    seen at older hyperparameters.
    """
    from ppl_sparsegp.optim import gamma_schedule

    if gamma is not None:
        return gamma
    if full_batch:
        return 1.0
    return gamma_schedule(peak=1.0, ramp_steps=0, floor=floor)


def _blocks(X, y, B, per_epoch, passes):
    """The step blocks of one quarter epoch each: ``(Xb (k, B, D), yb (k, B))``, the rows of each epoch
    a fresh permutation (the last N mod B rows of it left out), for ``passes`` (natgrad, minibatches)."""
    import numpy as np

    rng = np.random.default_rng(0)
    X, y = np.asarray(X), np.asarray(y)
    for _ in range(passes):
        perm = rng.permutation(len(y))[:per_epoch * B].reshape(per_epoch, B)
        for idx in np.array_split(perm, min(4, per_epoch)):
            yield X[idx], y[idx]


def train_to_target(gp, X, y, Xs, ys, y_sd, *, optimizer, init, target, args, lr=None):
    """SVI from ``init`` until the test NLPD is within the tolerance (then one more epoch, natgrad) or the
    epoch budget ends; the test NLPD every quarter epoch; ``lr``: natgrad's Adam rate on the hyperparameters
    (default ``--lr``). Returns the row's fields."""
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
    if batch < 0:  # natgrad's default: at least 16 hyperparameter steps per epoch, at most 256 rows per step
        batch = min(256, max(32, N // 16))
    B = N if batch == 0 else min(batch, N)
    per_epoch = max(1, N // B)
    every = max(1, per_epoch // 4)
    passes = optimizer == "natgrad" and B < N  # natgrad on minibatches: one permutation per epoch
    kwargs = {} if B == N or passes else {"batch_size": B}
    if optimizer == "natgrad":
        gamma = natgrad_gamma(args.gamma, args.gamma_floor, full_batch=B == N)
        lr = args.lr if lr is None else lr
        svi = SVI(gp.model, gp.guide, NaturalGradient(gp, numpyro.optim.Adam(lr), gamma=gamma),
                  AnalyticELBO(gp))
    else:
        svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(args.lr), TraceMeanField_ELBO())
    state = svi.init(jax.random.PRNGKey(0), X, y, init_params=init, **({} if passes else kwargs))

    @jax.jit
    def advance(state, X, y):
        if passes:  # a block of minibatches (k, B, ...) of the epoch's permutation
            return jax.lax.scan(lambda s, b: (svi.update(s, *b, num_data=N)[0], None), state, (X, y))[0]
        return jax.lax.fori_loop(0, every, lambda i, s: svi.update(s, X, y, **kwargs)[0], state)

    blocks = _blocks(X, y, B, per_epoch, args.epochs) if passes else \
        ((X, y) for _ in range(-(-args.epochs * per_epoch // every)))
    predict = jax.jit(lambda Xc, p: gp.predict(Xc, params=p))
    steps, seconds, trace, reached, compile_s = 0, 0.0, [], None, 0.0
    for Xb, yb in blocks:
        with harness.clock() as c:
            state = jax.block_until_ready(advance(state, Xb, yb))
        seconds, compile_s = seconds + c.wall, compile_s + c.compile
        steps += len(Xb) if passes else every
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
        row.update(rejected=NaturalGradient.rejected_steps(state.optim_state),
                   gamma=args.gamma if args.gamma is not None else 1.0 if B == N else
                   f"max(1/(t+1), {args.gamma_floor})", natgrad_lr=lr)
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
        for lr in _natgrad_lrs(args) if optimizer == "natgrad" else [None]:
            gp = SparseGP(feature, kernel, noise)
            init = {f"{k}_map": v for k, v in v0.items()}
            row = train_to_target(gp, X, y, Xs, ys, scaler["y_sd"], optimizer=optimizer, init=init,
                                  target=ref + args.tolerance, args=args, lr=lr)
            rows.append({**base, **row, "load": os.getloadavg()[0]})
    return rows


def _natgrad_lrs(args):
    """The hyperparameters' Adam rates of the natgrad rows (``--natgrad-lr``, a comma list; default ``--lr``)."""
    return [args.lr] if args.natgrad_lr is None else [float(v) for v in str(args.natgrad_lr).split(",")]


# --- (c) the airline-size set: one epoch of minibatches ------------------------------------------------------------
def airline_start(feature, map_feature, prior, lik, X, y, *, subsample, seed, maxiter):
    """``fit_spherical``'s stage 1 (the subsample MAP; the same rows, seed and model): the starting point."""
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp import CollapsedGP
    from ppl_sparsegp.approximations.map_estimate import map_lbfgs

    idx = np.sort(np.random.default_rng(seed).choice(len(y), min(subsample, len(y)), replace=False))
    small = CollapsedGP(map_feature, prior, lik)
    v0, _ = map_lbfgs(small.model, small.hyperparameter_sites(), num_steps=maxiter, rng_key=seed,
                      model_args=(jnp.asarray(X[idx], jnp.float64), jnp.asarray(y[idx], jnp.float64)))
    return v0


def run_airline_svi(args):
    """Part (c): the collapsed fit (``fit_spherical``, as ``spherical.py`` part b) against natural-gradient SVI
    for one epoch of minibatches of ``--airline-batch`` from its starting point; test MSE of both."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    from numpyro.infer import SVI

    from inference.benchmarks.spherical import airline_data, airline_model, predict_chunks
    from ppl_sparsegp import SparseGP, fit_spherical
    from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient

    Xtr, ytr, Xte, yte, f_test = airline_data(args.airline_n)
    feature, map_feature, prior, lik, kw = airline_model(Xtr.shape[1], args.airline_degree)
    row = {"n_train": len(ytr), "n_test": len(yte), "M": int(feature.num_features), "batch": args.airline_batch,
           "oracle_mse": float(np.mean((yte - f_test) ** 2)), "load_before": os.getloadavg()[0]}
    with harness.clock() as c:
        fit = fit_spherical(feature, prior, lik, Xtr, ytr, num_steps=args.maxiter, chunk_size=8192, **kw)
    m, _ = fit.predict(Xte, chunk_size=8192)
    row.update(collapsed_s=c.wall, collapsed_mse=float(np.mean((yte - m) ** 2)))
    v0 = airline_start(feature, map_feature, prior, lik, Xtr, ytr, subsample=kw["subsample"], seed=kw["seed"],
                       maxiter=args.maxiter)
    fixed = ("lengthscale", "bias")  # the map (s, b): fit_spherical's stage 1, fixed from there on
    row["start_matches_fit"] = bool(all(np.allclose(v0[f"kernel_{f}"], fit.values[f"kernel_{f}"]) for f in fixed))
    gp = SparseGP(feature, prior.replace(**{f: jnp.asarray(v0[f"kernel_{f}"]) for f in fixed}), lik)
    init = {f"{k}_map": v for k, v in v0.items() if k not in ("kernel_lengthscale", "kernel_bias")}
    N, B = len(ytr), min(args.airline_batch, len(ytr))
    lr = _natgrad_lrs(args)[0]
    gamma = natgrad_gamma(args.gamma, args.gamma_floor, full_batch=False)
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp, numpyro.optim.Adam(lr), gamma=gamma), AnalyticELBO(gp))
    state = svi.init(jax.random.PRNGKey(0), jnp.asarray(Xtr[:B]), jnp.asarray(ytr[:B]), init_params=init)
    advance = jax.jit(lambda s, Xb, yb: jax.lax.scan(
        lambda s, b: (svi.update(s, *b, num_data=N)[0], None), s, (Xb, yb))[0])
    seconds, trace, steps = 0.0, [], 0
    for Xb, yb in _blocks(Xtr, ytr, B, N // B, 1):  # one epoch, in quarters
        with harness.clock() as c:
            state = jax.block_until_ready(advance(state, jnp.asarray(Xb), jnp.asarray(yb)))
        seconds, steps = seconds + c.wall, steps + len(Xb)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mq, _ = predict_chunks(gp, svi.get_params(state), Xte[:100_000], chunk=8192)
        trace.append((steps, steps * B / N, seconds, float(np.mean((yte[:100_000] - mq) ** 2))))
    m, _ = predict_chunks(gp, svi.get_params(state), Xte, chunk=8192)
    row.update(svi_steps=steps, svi_epochs=steps * B / N, svi_s=seconds, svi_mse=float(np.mean((yte - m) ** 2)),
               trace_test100k=trace, rejected=NaturalGradient.rejected_steps(state.optim_state), natgrad_lr=lr,
               gamma=args.gamma if args.gamma is not None else f"max(1/(t+1), {args.gamma_floor})",
               load_after=os.getloadavg()[0])
    row["mse_gap"] = row["svi_mse"] - row["collapsed_mse"]
    return row


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
    p.add_argument("--parts", default="a,b,c")
    p.add_argument("--data-dir", default=None, help="the data folder (default ../shared/data)")
    p.add_argument("--datasets", default=",".join(UCI))
    p.add_argument("--features", default="spherical,inducing")
    p.add_argument("--optimizers", default="natgrad,adam")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--max-features", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=256, help="Adam's minibatch rows (0: the full batch)")
    p.add_argument("--natgrad-batch", type=int, default=-1, help="natural gradients' minibatch rows (default "
                   "min(256, max(32, N // 16)): at least 16 steps per epoch; 0: the full batch, where one step "
                   "with γ = 1 reaches the optimal q)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam's learning rate (the adam rows)")
    p.add_argument("--natgrad-lr", default=None, help="the hyperparameters' Adam learning rate in the natgrad "
                   "rows, or a comma list of them (one row each; default --lr; part c takes the first)")
    p.add_argument("--gamma", type=float, default=None, help="a constant natural-gradient step size (default: "
                   "1 on the full batch; max(1/(t+1), --gamma-floor) at step t with minibatches)")
    p.add_argument("--gamma-floor", type=float, default=0.0, help="the floor of the minibatch schedule")
    p.add_argument("--tolerance", type=float, default=0.02)
    p.add_argument("--collapsed-subsample", type=int, default=2000)
    p.add_argument("--maxiter", type=int, default=200)
    p.add_argument("--airline-n", type=int, default=3_952_942, help="(c) training rows (default: airline size)")
    p.add_argument("--airline-degree", type=int, default=3, help="(c) the features' largest degree (M = 210)")
    p.add_argument("--airline-batch", type=int, default=1024, help="(c) minibatch rows")
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
                 "class_steps": 200, "class_eval": 20, "airline_n": 20_000, "airline_degree": 2}
        for k, v in small.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    machine = harness.setup(args)
    parts = args.parts.split(",")
    result = {"machine": machine, "settings": {k: v for k, v in vars(args).items() if k not in ("out", "merge")},
              "load_before": os.getloadavg()[0]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    store = harness.Store(args.out, ["part"], resume=False)
    if "a" in parts:
        rows = result["uci"] = []
        for name in args.datasets.split(","):
            for kind in args.features.split(","):
                rows += run_uci(name, kind, args, args.data_dir)
                print(harness.table(rows[-2:], _A_COLUMNS), flush=True)
                store.write_json(result)  # what is done so far: an interrupted run keeps it
        print("\n(a) UCI: test NLPD within", args.tolerance, "of the collapsed fit with the same features\n")
        print(harness.table(rows, _A_COLUMNS))
    if "b" in parts:
        rows = [run_nonconjugate(task, seed, opt, args) for task in args.tasks.split(",")
                for seed in range(args.first_seed, args.first_seed + args.seeds) for opt in ("natgrad", "adam")]
        result["nonconjugate_runs"] = rows
        result["nonconjugate"] = summarise_nonconjugate(rows)
        print("\n(b) non-conjugate: steps to within 0.1 % of the best ELBO reached (median over converged seeds)\n")
        print(harness.table(result["nonconjugate"], _B_COLUMNS))
    if "c" in parts:
        result["airline"] = row = run_airline_svi(args)
        print("\n(c) airline size: test MSE after one epoch of natural-gradient SVI against the collapsed fit\n")
        print(harness.table([row], _C_COLUMNS))
    result["load_after"] = os.getloadavg()[0]
    store.write_json(result)
    return result


_A_COLUMNS = [("set", "dataset", ""), ("features", "features", ""), ("M", "M", "d"), ("N", "n_train", "d"),
              ("optimiser", "optimizer", ""), ("batch", "batch", "d"), ("natgrad lr", "natgrad_lr", ""),
              ("collapsed NLPD", "collapsed_nlpd", ".3f"), ("best NLPD", "best_nlpd", ".3f"),
              ("steps to target", "reached_steps", "d"), ("epochs to target", "reached_epochs", ".2f"),
              ("s to target", "reached_s", ".1f"), ("epochs run", "epochs_run", ".2f")]
_C_COLUMNS = [("N", "n_train", "d"), ("M", "M", "d"), ("batch", "batch", "d"),
              ("collapsed MSE", "collapsed_mse", ".4f"), ("collapsed s", "collapsed_s", ".1f"),
              ("SVI epochs", "svi_epochs", ".2f"), ("SVI MSE", "svi_mse", ".4f"),
              ("SVI − collapsed", "mse_gap", "+.4f"), ("SVI s", "svi_s", ".1f"), ("oracle MSE", "oracle_mse", ".4f")]
_B_COLUMNS = [("task", "task", ""), ("N", "n", "d"), ("optimiser", "optimizer", ""), ("seeds", "seeds", "d"),
              ("converged", "converged", "d"), ("failures", "failures", "d"), ("rejected steps", "rejected", "d"),
              ("median steps", "median_steps", ".0f"), ("median s", "median_s", ".2f"),
              ("final ELBO", "final_elbo", ".2f")]

if __name__ == "__main__":
    main()
