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

import os
import time

from inference.benchmarks import harness

VARIANCE, LENGTHSCALE, NOISE_SD = 0.5, 0.5, 0.01


def make_gp(kind, M, X, q_cov, T=50, fixed=False):
    import math

    import numpy as np
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    from ppl_sparsegp import (
        Gaussian,
        HermiteFeatures,
        InducingPoints,
        Param,
        SparseGP,
        SquaredExponential,
        TrigonometricFeatures,
    )

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

    from ppl_sparsegp import Kuf, Kuu, SufficientStatistics
    from ppl_sparsegp.approximations.collapsed import optimal_whitened_q

    gp = make_gp(kind, M, X, "full", T=T, fixed=True)
    ex = make_gp("trig", M, X, "full", fixed=True)
    stats = SufficientStatistics.from_kuf(Kuf(ex.feature, ex.kernel, X), y)
    m, S = optimal_whitened_q(Kuu(ex.feature, ex.kernel), stats, NOISE_SD**2)
    params = {"f_v_loc": m, "f_v_scale_tril": jnp.linalg.cholesky(S.to_dense())}
    loss = TraceMeanField_ELBO().loss
    a = jax.jit(jax.vmap(lambda k: -loss(k, params, gp.model, gp.guide, X, y)))(keys)
    b = jax.jit(jax.vmap(lambda k: -loss(k, params, ex.model, ex.guide, X, y)))(keys)
    return float(np.std(a)), float(np.std(np.asarray(a) - np.asarray(b)))


LABELS = {"svgp": "SVGP (inducing points)", "hermite": "Hermite VOF", "trig": "TrigVOF quadrature",
          "stratified": "TrigVOF MC stratified", "paired": "TrigVOF MC paired"}


def _g(v):
    return f"{v:.3g}"


def main(argv=None):
    p = harness.parser("vof_cost", __doc__)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--steps", type=int, default=50, help="SVI steps per timed block")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    machine = harness.setup(args)
    import jax
    import jax.numpy as jnp
    import numpy as np

    n = 1000 if args.quick else args.n
    Ms = [31] if args.quick else [31, 71]
    Ts = [10, 50, 100] if args.quick else [10, 25, 50, 100, 200]
    repeats = 5 if args.quick else args.repeats
    batch = min(args.batch_size, n)
    spread_keys = jax.random.split(jax.random.PRNGKey(1), 100 if args.quick else 300)
    store = harness.Store(args.out, ["M", "features", "q_cov", "T"], resume=args.resume, merge=args.merge,
                          settings={"n": n, "batch_size": batch, "steps": args.steps, "repeats": repeats,
                                    "spread_keys": len(spread_keys)})
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 3.0, n)
    # a GP draw by random features (an exact O(n³) draw is needless for timing): SE spectral frequencies
    w, phase = rng.normal(0.0, 1 / LENGTHSCALE, 2000), rng.uniform(0, 2 * np.pi, 2000)
    f = np.sqrt(2 * VARIANCE / 2000) * np.cos(np.outer(x, w) + phase) @ rng.normal(size=2000)
    X, y = jnp.asarray(x[:, None]), jnp.asarray(f + NOISE_SD * rng.normal(size=n))
    # the spread needs the full-batch objective: on the first 1000 points
    Xs, ys = X[:1000], y[:1000]

    t_start = time.perf_counter()
    print(f"N = {n}, minibatch {batch}, {args.steps} steps per timed block, median of {repeats}; "
          f"load average {os.getloadavg()[0]:.1f}")
    configs = [("svgp", "full", None), ("svgp", "diag", None), ("hermite", "full", None),
               ("hermite", "diag", None), ("trig", "full", None), ("trig", "diag", None)]
    configs += [(est, "diag", T) for est in ("stratified", "paired") for T in Ts]
    for M in Ms:  # the configurations of one M are timed together (round robin): resumed as a whole
        if all(store.done(M, kind, q_cov, T) for kind, q_cov, T in configs):
            continue
        blocks, compile_s = [], []
        for kind, q_cov, T in configs:
            with harness.clock() as c:
                blocks.append(compiled_block(make_gp(kind, M, X, q_cov, T=T or 50), X, y, batch, args.steps))
            compile_s.append(c.wall)
        secs = time_round_robin(blocks, args.steps, repeats)
        for (kind, q_cov, T), sec, comp in zip(configs, secs, compile_s):
            sd_total = sd_mc = None
            if T is not None:
                sd_total, sd_mc = elbo_spread(kind, M, T, Xs, ys, spread_keys)
            store.add({"M": M, "features": kind, "q_cov": q_cov, "T": T, "seconds_per_step": sec,
                       "ratio_to_svgp": sec / secs[0], "elbo_sd_total": sd_total, "elbo_sd_mc": sd_mc,
                       "compile_s": comp - sec * args.steps})  # the first block minus a steady-state one
        print(f"M = {M} done", flush=True)
    rows = [r for r in store.rows if r["M"] in Ms]
    print("\n" + harness.table(rows, [
        ("M", "M", "d"), ("features", lambda r: LABELS[r["features"]], ""), ("q(u)", "q_cov", ""),
        ("T", lambda r: r["T"] or "", ""), ("ms / step", lambda r: 1e3 * r["seconds_per_step"], ".3g"),
        ("/ SVGP (same M, full S)", "ratio_to_svgp", ".2f"), ("compile s", "compile_s", ".1f"),
        ("sd total", "elbo_sd_total", _g), ("sd MC", "elbo_sd_mc", _g)]))
    total = time.perf_counter() - t_start
    print(f"\n(sd columns: spread of the full-batch ELBO estimate over {len(spread_keys)} keys, N = 1000)")
    print(f"total {total:.0f} s")
    store.write_json({"quick": args.quick, "n": n, "batch_size": batch, "rows": rows, "seconds": total,
                      "load_average": os.getloadavg(), **machine})


if __name__ == "__main__":
    main()
