"""Time per NUTS gradient: whitened VFF versus inducing points as the number of features doubles.

The MCMC formulation (``SparseGP.model`` under NUTS) with a Poisson likelihood on N 1-D inputs, the
lengthscale and variance sampled (so Kuu is rebuilt at every gradient). With VFF, Kuu = D + BBᵀ makes
the projection Rᵀ Kuu⁻¹ Kuf cost O(NM); with inducing points it is a dense triangular solve, O(NM²) plus
O(M³). Each row times ``jax.grad`` of the jitted potential energy (median of repeated calls, after
compilation, which is reported apart) for both families with the same M' = 2M − 1 features, in the same run.

``python -m inference.benchmarks.vff_mcmc_cost [--quick]``; writes results/vff_mcmc_cost.json.
"""
from __future__ import annotations

import os

from inference.benchmarks import harness


def time_gradient(model, args, repeats):
    """:class:`~inference.benchmarks.harness.Timing` of the gradient of the model's potential energy."""
    import jax
    from numpyro.infer.util import initialize_model

    info = initialize_model(jax.random.PRNGKey(0), model, model_args=args)
    return harness.timed(jax.grad(info.potential_fn), info.param_info.z, repeats=repeats)


def main(argv=None):
    p = harness.parser("vff_mcmc_cost", __doc__)
    p.add_argument("--n", type=int, default=20_000, help="number of observations")
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args(argv)
    machine = harness.setup(args)
    import jax.numpy as jnp
    import numpy as np
    import numpyro.distributions as dist

    from ppl_sparsegp import FourierFeatures, InducingPoints, Matern32, Poisson, SparseGP

    n = 2000 if args.quick else args.n
    Ms = [8, 16, 32, 64] if args.quick else [16, 32, 64, 128, 256, 512]
    store = harness.Store(args.out, ["M"], settings={"n": n, "repeats": args.repeats}, resume=args.resume,
                          merge=args.merge)
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.uniform(0, 1, (n, 1)))
    y = jnp.asarray(rng.poisson(np.exp(1 + np.sin(8 * np.asarray(X[:, 0])))))
    kernel = Matern32(variance=dist.LogNormal(0, 1), lengthscale=dist.LogNormal(-1, 1))
    print(f"N = {n}; load average {os.getloadavg()[0]:.1f}")
    for M in Ms:
        if store.done(M):
            continue
        m = 2 * M - 1
        vff = SparseGP(FourierFeatures(-1.0, 2.0, M), kernel, Poisson())
        ip = SparseGP(InducingPoints(jnp.linspace(0, 1, m)[:, None]), kernel, Poisson())
        t_vff = time_gradient(vff.model, (X, y), args.repeats)
        t_ip = time_gradient(ip.model, (X, y), args.repeats)
        store.add({"M": M, "features": m, "vff_s": t_vff.median_s, "ip_s": t_ip.median_s,
                   "vff_compile_s": t_vff.compile_s, "ip_compile_s": t_ip.compile_s})
        print(f"M = {M}: VFF {1e3 * t_vff.median_s:.2f} ms, inducing points {1e3 * t_ip.median_s:.2f} ms", flush=True)
    rows = sorted((r for r in store.rows if r["M"] in Ms), key=lambda r: r["M"])
    print(harness.table(rows, [
        ("frequencies M", "M", "d"), ("features 2M-1", "features", "d"),
        ("VFF ms/grad", lambda r: 1e3 * r["vff_s"], ".2f"),
        ("inducing points ms/grad", lambda r: 1e3 * r["ip_s"], ".2f"),
        ("IP / VFF", lambda r: r["ip_s"] / r["vff_s"], ".1f"),
        ("compile s VFF / IP", lambda r: f"{r['vff_compile_s']:.1f} / {r['ip_compile_s']:.1f}", "")]))
    # growth per doubling of M at the largest sizes: ≈2 means linear, ≈4 quadratic
    g_vff = rows[-1]["vff_s"] / rows[-2]["vff_s"]
    g_ip = rows[-1]["ip_s"] / rows[-2]["ip_s"]
    print(f"growth over the last doubling: VFF x{g_vff:.2f}, inducing points x{g_ip:.2f}")
    store.write_json({"n": n, "rows": rows, "growth_vff": g_vff, "growth_ip": g_ip,
                      "load_average": os.getloadavg(), **machine})


if __name__ == "__main__":
    main()
