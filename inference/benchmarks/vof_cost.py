"""Time per SVI step: variational orthogonal features versus inducing points, and versus the MC grid T.

Data as in ``vof_elbo_gap`` (N inputs from N(0, 3²), SE kernel variance 0.5, lengthscale 0.5, noise sd
0.01). Every model learns the kernel variance, lengthscale and noise (point estimates) and its feature
parameters (inducing inputs Z; Hermite σ_p; TrigVOF band a); q(u) full (Cholesky) or diagonal. One SVI
step = ``svi.update`` of ``TraceMeanField_ELBO`` on a minibatch of Ñ points, jitted, timed after
compilation (median over repeats of a block of steps). Rows:

* SVGP: inducing points, O(ÑM² + M³) per step;
* Hermite VOF: closed-form Kuf by recurrence, Kuu = I, O(ÑM²) (full S) / O(ÑM) (diagonal S);
* TrigVOF, quadrature: Kuf by G = 512 Gauss–Legendre nodes, O(ÑMG);
* TrigVOF, Monte Carlo, stratified (two grids of T, outer product: O(T²(M+Ñ))) and paired (O(T(M+Ñ))).

For the MC rows the table also gives the spread of the ELBO estimate at a fixed q (the closed-form
optimum at fixed hyperparameters, band 9): ``sd total`` of −loss over keys (includes the one-draw
sampling of u that every SVGP objective has), and ``sd MC`` of its difference from the same-key
objective with quadrature Kuf (the estimator's own noise). Speeds are ratios to SVGP at the same M in
the same run (the machine is shared: absolute times vary).

``python -m inference.benchmarks.vof_cost [--quick]``; writes results/vof_cost.json.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

VARIANCE, LENGTHSCALE, NOISE_SD = 0.5, 0.5, 0.01


def make_gp(kind, M, X, q_cov, T=50, fixed=False):
    import math

    import numpy as np
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    from ppl_sparsegp import InducingPoints, Param, SparseGP, SquaredExponential
    from ppl_sparsegp.features.orthogonal import HermiteFeatures, TrigonometricFeatures
    from ppl_sparsegp.likelihoods import Gaussian

    if fixed:
        kernel, lik = SquaredExponential(VARIANCE, LENGTHSCALE), Gaussian(NOISE_SD**2)
    else:
        kernel = SquaredExponential(variance=dist.LogNormal(math.log(VARIANCE), 1.0),
                                    lengthscale=dist.LogNormal(math.log(LENGTHSCALE), 1.0))
        lik = Gaussian(variance=dist.LogNormal(math.log(NOISE_SD**2), 1.0))
    positive = constraints.positive
    if kind == "svgp":
        Z = np.linspace(float(X.min()), float(X.max()), M)[:, None]
        feature = InducingPoints(Param(Z))
    elif kind == "hermite":
        feature = HermiteFeatures(M, input_scale=Param(3.0, positive))
    elif kind == "trig":
        feature = TrigonometricFeatures(M, band=9.0 if fixed else Param(9.0, positive))
    else:  # "stratified" / "paired"
        feature = TrigonometricFeatures(M, band=9.0 if fixed else Param(9.0, positive), estimator=kind,
                                        num_samples=T)
    return SparseGP(feature, kernel, lik, q_cov=q_cov)


def time_step(gp, X, y, batch, steps, repeats):
    import jax
    import numpy as np
    import numpyro
    from numpyro.infer import SVI, TraceMeanField_ELBO

    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(1e-3), TraceMeanField_ELBO())
    state = svi.init(jax.random.PRNGKey(0), X, y, batch_size=batch)

    @jax.jit
    def block(state):
        def body(s, _):
            s, loss = svi.update(s, X, y, batch_size=batch)
            return s, loss
        return jax.lax.scan(body, state, None, length=steps)

    state, losses = block(state)  # compile
    jax.block_until_ready(losses)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state, losses = block(state)
        jax.block_until_ready(losses)
        times.append((time.perf_counter() - t0) / steps)
    assert np.all(np.isfinite(np.asarray(losses))), "non-finite SVI loss"
    return float(np.median(times))


def elbo_spread(kind, M, T, X, y, keys):
    """sd of −loss (total) and of −loss minus the same-key quadrature objective (MC only), at the
    closed-form optimum q for band 9, fixed hyperparameters, full batch."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer import TraceMeanField_ELBO

    from ppl_sparsegp import Kuf, Kuu
    from ppl_sparsegp.collapsed import optimal_whitened_q, sufficient_statistics

    gp = make_gp(kind, M, X, "full", T=T, fixed=True)
    ex = make_gp("trig", M, X, "full", fixed=True)
    stats = sufficient_statistics(Kuf(ex.feature, ex.kernel, X), y)
    m, S = optimal_whitened_q(Kuu(ex.feature, ex.kernel), stats, NOISE_SD**2)
    params = {"f_v_loc": m, "f_v_scale_tril": jnp.linalg.cholesky(S.to_dense())}
    loss = TraceMeanField_ELBO().loss
    a = jax.jit(jax.vmap(lambda k: -loss(k, params, gp.model, gp.guide, X, y)))(keys)
    b = jax.jit(jax.vmap(lambda k: -loss(k, params, ex.model, ex.guide, X, y)))(keys)
    return float(np.std(a)), float(np.std(np.asarray(a) - np.asarray(b)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N = 1000, M = 31, T in {10, 50}, fewer repeats")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--steps", type=int, default=50, help="SVI steps per timed block")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)

    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp import SquaredExponential

    n = 1000 if args.quick else args.n
    Ms = [31] if args.quick else [31, 71]
    Ts = [10, 50] if args.quick else [10, 25, 50, 100]
    repeats = 3 if args.quick else args.repeats
    batch = min(args.batch_size, n)
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 3.0, n)
    # a GP draw by random features (an exact O(n³) draw is needless for timing): SE spectral frequencies
    w, phase = rng.normal(0.0, 1 / LENGTHSCALE, 2000), rng.uniform(0, 2 * np.pi, 2000)
    f = np.sqrt(2 * VARIANCE / 2000) * np.cos(np.outer(x, w) + phase) @ rng.normal(size=2000)
    X, y = jnp.asarray(x[:, None]), jnp.asarray(f + NOISE_SD * rng.normal(size=n))
    # the spread needs the full-batch objective: on the first 1000 points
    Xs, ys = X[:1000], y[:1000]
    spread_keys = jax.random.split(jax.random.PRNGKey(1), 100 if args.quick else 300)

    t_start = time.perf_counter()
    print(f"N = {n}, minibatch {batch}, {args.steps} steps per timed block, median of {repeats}; "
          f"load average {os.getloadavg()[0]:.1f}")
    configs = [("svgp", "full", None), ("svgp", "diag", None), ("hermite", "full", None),
               ("hermite", "diag", None), ("trig", "full", None), ("trig", "diag", None)]
    configs += [(est, "diag", T) for est in ("stratified", "paired") for T in Ts]
    rows = []
    print("\n| M | features | q(u) | T | ms / step | / SVGP (same M, full S) | sd total | sd MC |")
    print("|---|---|---|---|---|---|---|---|")
    for M in Ms:
        ref = None
        for kind, q_cov, T in configs:
            gp = make_gp(kind, M, X, q_cov, T=T or 50)
            sec = time_step(gp, X, y, batch, args.steps, repeats)
            ref = sec if ref is None else ref
            sd_total = sd_mc = None
            if T is not None:
                sd_total, sd_mc = elbo_spread(kind, M, T, Xs, ys, spread_keys)
            label = {"svgp": "SVGP (inducing points)", "hermite": "Hermite VOF", "trig": "TrigVOF quadrature",
                     "stratified": "TrigVOF MC stratified", "paired": "TrigVOF MC paired"}[kind]
            rows.append({"M": M, "features": kind, "q_cov": q_cov, "T": T, "seconds_per_step": sec,
                         "ratio_to_svgp": sec / ref, "elbo_sd_total": sd_total, "elbo_sd_mc": sd_mc})
            fmt = lambda v: "" if v is None else f"{v:.3g}"
            print(f"| {M} | {label} | {q_cov} | {T or ''} | {1e3 * sec:.3g} | {sec / ref:.2f} | "
                  f"{fmt(sd_total)} | {fmt(sd_mc)} |", flush=True)
    total = time.perf_counter() - t_start
    print(f"\n(sd columns: spread of the full-batch ELBO estimate over {len(spread_keys)} keys, N = 1000)")
    print(f"total {total:.0f} s")
    out = Path(__file__).parent / "results" / "vof_cost.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"quick": args.quick, "n": n, "batch_size": batch, "rows": rows,
                               "seconds": total, "load_average": os.getloadavg()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
