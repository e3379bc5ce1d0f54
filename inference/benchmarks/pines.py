"""Pines LGCP: NUTS on whitened VFF versus numpyro.contrib.hsgp, and the lengthscale posterior over M.

Two parts (``python -m inference.benchmarks.pines [--quick]``):

1. **M sweep** (the paper's Figs. 10–11): the lengthscale posteriors for M frequencies per dimension;
   too small an M biases them upward, and the default M is chosen where they stop moving.
2. **Reference comparison** at ``--reference-frequencies`` (default 20): the same LGCP (priors,
   64 × 64 grid, Poisson counts) with
   ``numpyro.contrib.hsgp``'s Hilbert-space basis (m = 2M − 1 eigenfunctions per dimension, so the same
   number of basis functions, box half-width 1.5 ≈ VFF's [−1, 2]) driven by the product kernel's spectral
   density. Reported: min bulk/tail ESS per second over the hyperparameters, max R-hat, divergences,
   wall time (same run, so the ratio is meaningful on a shared machine).

Writes ``inference/benchmarks/results/pines.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

HYPER = ["kernel_0_variance", "kernel_0_lengthscale", "kernel_1_lengthscale", "mean"]


def hsgp_model(X, y, m, ell):
    """The pines LGCP with an HSGP basis (numpyro.contrib.hsgp) instead of VFF."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.hsgp.approximation import linear_approximation
    from numpyro.contrib.hsgp.laplacian import eigenfunctions, sqrt_eigenvalues

    from ppl_sparsegp import Matern32, Product

    v0 = numpyro.sample("kernel_0_variance", dist.Gamma(1.0, 1.0))
    l0 = numpyro.sample("kernel_0_lengthscale", dist.Gamma(0.1, 1.0))
    l1 = numpyro.sample("kernel_1_lengthscale", dist.Gamma(0.1, 1.0))
    c = numpyro.sample("mean", dist.Normal(0.0, math.sqrt(3.0)))
    kernel = Product([Matern32(v0, l0), Matern32(1.0, l1)])
    phi = eigenfunctions(X - 0.5, ell=[ell, ell], m=[m, m])
    omega = sqrt_eigenvalues(ell=[ell, ell], m=[m, m], dim=2).T  # (m², 2)
    spd = jnp.sqrt(kernel.spectral_density(omega))
    f = linear_approximation(phi, spd, m=m * m, non_centered=True)
    numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)


def run_nuts(model, args_, chains, warmup, samples, seed=0):
    import jax
    import numpy as np
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
    from numpyro.infer import MCMC, NUTS, init_to_median

    parallel = jax.local_device_count() >= chains
    mcmc = MCMC(NUTS(model, target_accept_prob=0.9, init_strategy=init_to_median(num_samples=15)),
                num_warmup=warmup, num_samples=samples, num_chains=chains,
                chain_method="parallel" if parallel else "sequential", progress_bar=False)
    t0 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), *args_, extra_fields=("diverging", "num_steps"))
    s = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(s)
    wall = time.perf_counter() - t0
    out = {"wall_s": wall, "divergences": int(mcmc.get_extra_fields()["diverging"].sum()),
           "mean_leapfrog": float(np.mean(mcmc.get_extra_fields()["num_steps"]))}
    bulk, tail, rhat = [], [], []
    for k in HYPER:
        x = np.asarray(s[k])
        bulk.append(float(effective_sample_size(x)))
        # tail ESS: ESS of the 5% and 95% quantile indicators (Vehtari et al. 2021)
        q5, q95 = np.quantile(x, [0.05, 0.95])
        tail.append(float(min(effective_sample_size((x <= q5).astype(float)),
                              effective_sample_size((x <= q95).astype(float)))))
        rhat.append(float(split_gelman_rubin(x)) if chains > 1 else float("nan"))
        out[k] = {"mean": float(x.mean()), "sd": float(x.std())}
    out.update(min_bulk_ess=min(bulk), min_tail_ess=min(tail), max_rhat=max(rhat),
               min_bulk_ess_per_s=min(bulk) / wall, min_tail_ess_per_s=min(tail) / wall)
    return out


def plot_sweep(sweep: dict, path):
    """Posterior mean ± sd of both lengthscales against M (the paper's Fig. 11)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ms = sorted(sweep, key=int)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for k, label in (("kernel_0_lengthscale", "ℓ₀"), ("kernel_1_lengthscale", "ℓ₁")):
        mean = [sweep[m][k]["mean"] for m in Ms]
        sd = [sweep[m][k]["sd"] for m in Ms]
        ax.errorbar([int(m) for m in Ms], mean, yerr=sd, marker="o", capsize=3, label=label)
    ax.set_xlabel("frequencies per dimension M")
    ax.set_ylabel("posterior lengthscale (mean ± sd)")
    ax.set_title("pines LGCP: lengthscale posterior against M")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="short chains, fewer M (smoke run)")
    p.add_argument("--sweep", type=int, nargs="*", default=None, help="frequencies per dimension to sweep")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--samples", type=int, default=None)
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--reference-frequencies", type=int, default=20,
                   help="M per dimension of the VFF-vs-HSGP comparison (default %(default)s: HSGP's dense "
                        "basis makes the model's default M = 64 take hours)")
    args = p.parse_args(argv)

    import numpyro
    numpyro.set_host_device_count(min(args.chains, os.cpu_count() or 1))
    import jax
    jax.config.update("jax_enable_x64", True)
    from types import SimpleNamespace

    from models import pines

    warmup = args.warmup or (150 if args.quick else 1000)
    samples = args.samples or (150 if args.quick else 1000)
    sweep = args.sweep or ([6, 12] if args.quick else [8, 12, 16, 20, 24, 28])
    out = Path(__file__).parent / "results" / "pines.json"
    # a part that is skipped keeps its stored results (the sweep and the reference may run separately);
    # an explicit --sweep adds its M to the stored sweep
    stored = json.loads(out.read_text()) if out.is_file() else {}
    results = {"load_average": os.getloadavg(), "devices": jax.local_device_count(),
               "sweep": dict(stored.get("sweep", {})) if args.sweep or args.skip_sweep else {},
               "comparison": {} if not args.skip_reference else stored.get("comparison", {}),
               "settings": {**stored.get("settings", {}),
                            **({"sweep": {"chains": 1, "warmup": warmup // 2, "samples": samples // 2}}
                               if not args.skip_sweep else {}),
                            **({"reference": {"chains": args.chains, "warmup": warmup, "samples": samples,
                                               "frequencies": args.reference_frequencies}}
                               if not args.skip_reference else {})}}

    if not args.skip_sweep:
        print("| M | features/dim | ℓ₀ mean ± sd | ℓ₁ mean ± sd | c mean | wall s |")
        print("|---|---|---|---|---|---|")
        for M in sweep:
            spec = pines.build(SimpleNamespace(num_frequencies=M, grid=64))
            r = run_nuts(spec.gp.model, (spec.X, spec.y), 1, warmup // 2, samples // 2)
            results["sweep"][str(M)] = r
            print(f"| {M} | {2 * M - 1} | {r['kernel_0_lengthscale']['mean']:.3f} ± "
                  f"{r['kernel_0_lengthscale']['sd']:.3f} | {r['kernel_1_lengthscale']['mean']:.3f} ± "
                  f"{r['kernel_1_lengthscale']['sd']:.3f} | {r['mean']['mean']:.2f} | {r['wall_s']:.0f} |",
                  flush=True)

    if not args.skip_reference:
        M = args.reference_frequencies
        spec = pines.build(SimpleNamespace(num_frequencies=M, grid=64))
        runs = {"VFF (whitened, Kronecker)": (spec.gp.model, (spec.X, spec.y)),
                "numpyro.contrib.hsgp": (lambda X, y: hsgp_model(X, y, 2 * M - 1, 1.5),
                                         (spec.X.points(), spec.y))}
        print(f"\nM = {M} frequencies per dimension ({(2 * M - 1) ** 2} basis functions), "
              f"{args.chains} chains x ({warmup} warm-up + {samples} draws)")
        print("| model | wall s | min bulk ESS/s | min tail ESS/s | max R-hat | divergences | leapfrog/draw |")
        print("|---|---|---|---|---|---|---|")
        for name, (model, a) in runs.items():
            r = run_nuts(model, a, args.chains, warmup, samples)
            results["comparison"][name] = r
            print(f"| {name} | {r['wall_s']:.0f} | {r['min_bulk_ess_per_s']:.2f} | "
                  f"{r['min_tail_ess_per_s']:.2f} | {r['max_rhat']:.3f} | {r['divergences']} | "
                  f"{r['mean_leapfrog']:.0f} |", flush=True)
    out.parent.mkdir(exist_ok=True)
    if results["sweep"]:
        plot_sweep(results["sweep"], out.with_name("pines_sweep.png"))
    out.write_text(json.dumps(results, indent=2, default=float))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main()
