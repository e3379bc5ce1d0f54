"""Time per NUTS gradient: whitened VFF versus inducing points as the number of features doubles.

The MCMC formulation (``SparseGP.model`` under NUTS) with a Poisson likelihood on N 1-D inputs, the
lengthscale and variance sampled (so Kuu is rebuilt at every gradient). With VFF, Kuu = D + BBᵀ makes
the projection Rᵀ Kuu⁻¹ Kuf cost O(NM); with inducing points it is a dense triangular solve, O(NM²) plus
O(M³). Each row times ``jax.grad`` of the jitted potential energy (median of repeated calls, after
compilation) for both families with the same M' = 2M − 1 features, in the same run.

``python -m inference.benchmarks.vff_mcmc_cost [--quick]``; writes results/vff_mcmc_cost.json.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def time_gradient(model, args, repeats):
    import jax
    import numpy as np
    from numpyro.infer.util import initialize_model

    info = initialize_model(jax.random.PRNGKey(0), model, model_args=args)
    params = info.param_info.z
    grad = jax.jit(jax.grad(info.potential_fn))
    jax.block_until_ready(grad(params))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(grad(params))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=int, default=20_000, help="number of observations")
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args(argv)

    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import numpyro.distributions as dist

    from ppl_sparsegp import InducingPoints, Matern32, SparseGP
    from ppl_sparsegp.features import FourierFeatures
    from ppl_sparsegp.likelihoods import Poisson

    n = 2000 if args.quick else args.n
    Ms = [8, 16, 32, 64] if args.quick else [16, 32, 64, 128, 256, 512]
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.uniform(0, 1, (n, 1)))
    y = jnp.asarray(rng.poisson(np.exp(1 + np.sin(8 * np.asarray(X[:, 0])))))
    kernel = Matern32(variance=dist.LogNormal(0, 1), lengthscale=dist.LogNormal(-1, 1))
    rows = []
    print(f"N = {n}; load average {os.getloadavg()[0]:.1f}")
    print("| frequencies M | features 2M-1 | VFF ms/grad | inducing points ms/grad | IP / VFF |")
    print("|---|---|---|---|---|")
    for M in Ms:
        m = 2 * M - 1
        vff = SparseGP(FourierFeatures(-1.0, 2.0, M), kernel, Poisson())
        ip = SparseGP(InducingPoints(jnp.linspace(0, 1, m)[:, None]), kernel, Poisson())
        t_vff = time_gradient(vff.model, (X, y), args.repeats)
        t_ip = time_gradient(ip.model, (X, y), args.repeats)
        rows.append({"M": M, "features": m, "vff_s": t_vff, "ip_s": t_ip})
        print(f"| {M} | {m} | {1e3 * t_vff:.2f} | {1e3 * t_ip:.2f} | {t_ip / t_vff:.1f} |", flush=True)
    # growth per doubling of M at the largest sizes: ≈2 means linear, ≈4 quadratic
    g_vff = rows[-1]["vff_s"] / rows[-2]["vff_s"]
    g_ip = rows[-1]["ip_s"] / rows[-2]["ip_s"]
    print(f"growth over the last doubling: VFF x{g_vff:.2f}, inducing points x{g_ip:.2f}")
    out = Path(__file__).parent / "results" / "vff_mcmc_cost.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"n": n, "rows": rows, "growth_vff": g_vff, "growth_ip": g_ip,
                               "load_average": os.getloadavg()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
