"""Time per SVI step: variational orthogonal features versus inducing points, and versus the MC grid T.

Data as in ``vof_elbo_gap`` (N inputs from N(0, 3²), SE kernel variance 0.5, lengthscale 0.5, noise sd
0.01). Every model learns the kernel variance, lengthscale and noise (point estimates) and its feature
parameters (inducing inputs Z; Hermite σ_p; TrigVOF band a); q(u) full (Cholesky) or diagonal. One SVI
step = ``svi.update`` of ``TraceMeanField_ELBO`` on a minibatch of Ñ points, jitted, timed after
compilation; the configurations take turns within each repeat and the median over repeats is kept.
Rows:

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


def compiled_block(gp, X, y, batch, steps):
    """A jitted block of ``steps`` SVI updates (compiled here) and its initial state."""
    import jax
    import numpyro
    from numpyro.infer import SVI, TraceMeanField_ELBO

    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(1e-3), TraceMeanField_ELBO())
    state = svi.init(jax.random.PRNGKey(0), X, y, batch_size=batch)

    @jax.jit
    def block(state):
        def body(s, _):
            return svi.update(s, X, y, batch_size=batch)
        return jax.lax.scan(body, state, None, length=steps)

    state, losses = block(state)  # compile
    jax.block_until_ready(losses)
    return block, state


def time_round_robin(blocks, steps, repeats):
    """Seconds per step of each block: the blocks take turns within every repeat (so a burst of load on
    the shared machine hits all of them alike); median over repeats."""
    import jax
    import numpy as np

    times = [[] for _ in blocks]
    states = [state for _, state in blocks]
    for _ in range(repeats):
        for i, (block, _) in enumerate(blocks):
            t0 = time.perf_counter()
            states[i], losses = block(states[i])
            jax.block_until_ready(losses)
            times[i].append((time.perf_counter() - t0) / steps)
            assert np.all(np.isfinite(np.asarray(losses))), "non-finite SVI loss"
    return [float(np.median(t)) for t in times]


def elbo_spread(kind, M, T, X, y, keys):
    """sd of −loss (total) and of −loss minus the same-key quadrature objective (MC only), at the
    closed-form optimum q for band 9, fixed hyperparameters, full batch."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer import TraceMeanField_ELBO

    from ppl_sparsegp import Kuf, Kuu
    from ppl_sparsegp.approximations.collapsed import optimal_whitened_q
    from ppl_sparsegp.covariances import SufficientStatistics

    gp = make_gp(kind, M, X, "full", T=T, fixed=True)
    ex = make_gp("trig", M, X, "full", fixed=True)
    stats = SufficientStatistics.from_kuf(Kuf(ex.feature, ex.kernel, X), y)
    m, S = optimal_whitened_q(Kuu(ex.feature, ex.kernel), stats, NOISE_SD**2)
    params = {"f_v_loc": m, "f_v_scale_tril": jnp.linalg.cholesky(S.to_dense())}
    loss = TraceMeanField_ELBO().loss
    a = jax.jit(jax.vmap(lambda k: -loss(k, params, gp.model, gp.guide, X, y)))(keys)
    b = jax.jit(jax.vmap(lambda k: -loss(k, params, ex.model, ex.guide, X, y)))(keys)
    return float(np.std(a)), float(np.std(np.asarray(a) - np.asarray(b)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N = 1000, M = 31, T in {10, 50, 100}, fewer repeats")
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
    Ts = [10, 50, 100] if args.quick else [10, 25, 50, 100, 200]
    repeats = 5 if args.quick else args.repeats
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
    labels = {"svgp": "SVGP (inducing points)", "hermite": "Hermite VOF", "trig": "TrigVOF quadrature",
              "stratified": "TrigVOF MC stratified", "paired": "TrigVOF MC paired"}
    rows = []
    for M in Ms:
        blocks = [compiled_block(make_gp(kind, M, X, q_cov, T=T or 50), X, y, batch, args.steps)
                  for kind, q_cov, T in configs]
        secs = time_round_robin(blocks, args.steps, repeats)
        for (kind, q_cov, T), sec in zip(configs, secs):
            sd_total = sd_mc = None
            if T is not None:
                sd_total, sd_mc = elbo_spread(kind, M, T, Xs, ys, spread_keys)
            rows.append({"M": M, "features": kind, "q_cov": q_cov, "T": T, "seconds_per_step": sec,
                         "ratio_to_svgp": sec / secs[0], "elbo_sd_total": sd_total, "elbo_sd_mc": sd_mc})
        print(f"M = {M} done", flush=True)
    print("\n| M | features | q(u) | T | ms / step | / SVGP (same M, full S) | sd total | sd MC |")
    print("|---|---|---|---|---|---|---|---|")
    fmt = lambda v: "" if v is None else f"{v:.3g}"
    for r in rows:
        print(f"| {r['M']} | {labels[r['features']]} | {r['q_cov']} | {r['T'] or ''} | "
              f"{1e3 * r['seconds_per_step']:.3g} | {r['ratio_to_svgp']:.2f} | {fmt(r['elbo_sd_total'])} | "
              f"{fmt(r['elbo_sd_mc'])} |")
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
