"""1-D Cox process in a user-written model: ``spectral_gp`` (VFF) against ``numpyro.contrib.hsgp`` and the
exact GP, in the same run.

``python -m inference.benchmarks.lgcp_1d [--quick] [--basis 31 61] [--seeds 20] [--square] [--exact]
[--no-exact] [--bins 200] [--chain-method {sequential,parallel}] [--cpu N]``

A count series of ``--bins`` (200) bins on [0, 1] is simulated once (fixed seed) from a Matérn-3/2 GP
(ℓ = 0.08, σ² = 1) with log-mean 1.5. Each model is written as a NumPyro user would write it, with the
same priors (ℓ ~ InverseGamma(3, 0.2), σ² ~ LogNormal(0, 1), c ~ N(1.5, 1)) and a Poisson likelihood on
exp(f + c):

* **exact**: f = L v, L the Cholesky factor of the N × N Gram matrix (the reference);
* **HSGP**: ``numpyro.contrib.hsgp.approximation.hsgp_matern`` with m basis functions and L = c·S,
  c = max(1.2, 4.5 ℓ_min/S) (Riutort-Mayol et al. 2023) at ℓ_min = 0.03;
* **VFF**: ``spectral_gp("f", FourierFeatures(a, b, M), Matern32(σ², ℓ), x)`` with 2M − 1 = m, the box of
  :meth:`FourierFeatures.from_data` at ℓ_min (3 ℓ_min beyond the data); with ``--square`` also
  ``VFF square``, which whitens through
  the lower Cholesky factor of Kuu (dense) instead of VFF's closed-form square root D^½(I + GGᵀ)^½
  (the two are the same prior; they differ in the coordinates NUTS moves in).

NUTS runs 2 chains × (300 warm-up + 600 draws) per fit, one after another (``--chain-method parallel``: one
host device per chain, as ``python -m inference fit`` and NumPyro's own advice for CPUs do, both devices
on the one pinned core; NumPyro 0.22 recompiles its sampling loop for every sequential chain, and a
parallel run compiles its chains, their initialisation included, as one program; the results then go to
``lgcp_1d_parallel.json``, the exact reference is read from ``lgcp_1d.json``), and each model is fit with
``--seeds`` (20) seeds, every fit in a fresh process pinned to the same core: it pays the compilation a
user pays in a new session, and min bulk ESS varies by about ±40% between seeds (the VFF/HSGP ratio of
medians at 61 basis functions was 0.86 over seeds 0–4, 1.08 over seeds 0–9 and 0.90 over seeds 10–19), so
the table gives medians over the seeds (the per-seed figures are in the JSON) and the VFF/HSGP ratio of
medians comes with a 95% bootstrap interval over the seeds. Per row: min bulk ESS per
CPU-second (process time of the fit, compilation included; the seconds of it JAX spent tracing and
compiling, and min bulk ESS per CPU-second of the rest, the sampling), ms per gradient (timed apart from
compilation), leapfrog steps per draw, R-hat, the hyperparameters' distance to the exact posterior
(|mean − exact mean| / exact sd, the mean over the seeds' posterior means) and the posterior intensity curve's
largest distance to the exact one, max over bins of |E λ − E_exact λ| / sd_exact(λ). The exact GP (its
N × N Cholesky per gradient makes it the slow part: 451 CPU s) is run once and stored in the results JSON;
``--exact`` re-runs it. Writes ``inference/benchmarks/results/lgcp_1d.json`` (other ``--bins``:
``lgcp_1d_<bins>bins.json``). Longer series with ``--no-exact`` (past 400 bins the exact GP's N × N
Cholesky per gradient is out of reach; compilation is still most of a fit at 500 bins, sampling at 2000):
the distances are then to the HSGP row at the same basis count.
"""
from __future__ import annotations

import argparse
import math

from inference.benchmarks import harness

HYPER = ["ell", "var", "c"]
ELL_MIN = 0.03


def simulate(bins=200, seed=0):
    """(x (N,), counts (N,)) of the fixed test series."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = (np.arange(bins) + 0.5) / bins
    r = np.abs(x[:, None] - x[None, :]) * math.sqrt(3.0) / 0.08
    K = (1 + r) * np.exp(-r)
    f = np.linalg.cholesky(K + 1e-8 * np.eye(bins)) @ rng.standard_normal(bins)
    return x, rng.poisson(np.exp(f + 1.5)).astype(float)


def _priors():
    import numpyro
    import numpyro.distributions as dist

    ell = numpyro.sample("ell", dist.InverseGamma(3.0, 0.2))
    var = numpyro.sample("var", dist.LogNormal(0.0, 1.0))
    c = numpyro.sample("c", dist.Normal(1.5, 1.0))
    return ell, var, c


def exact_model(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    from ppl_sparsegp import Matern32

    ell, var, c = _priors()
    L = jnp.linalg.cholesky(Matern32(var, ell)(x[:, None]) + 1e-6 * jnp.eye(x.shape[0]))
    f = numpyro.deterministic("f", L @ numpyro.sample("v", dist.Normal(0.0, 1.0).expand([x.shape[0]]).to_event(1)))
    numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)


def hsgp_model(x, y, m, L):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.hsgp.approximation import hsgp_matern

    ell, var, c = _priors()
    f = numpyro.deterministic("f", hsgp_matern(x[:, None] - 0.5, nu=1.5, alpha=var, length=ell, ell=L, m=m))
    numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)


def vff_model(x, y, feature):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    from ppl_sparsegp import Matern32, spectral_gp

    ell, var, c = _priors()
    f = numpyro.deterministic("f", spectral_gp("f", feature, Matern32(var, ell), x))
    numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)


def vff_square_model(x, y, feature):
    """VFF whitened through the square Cholesky factor of Kuu (for the leapfrog comparison)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.linalg import cho_solve

    from ppl_sparsegp import Kuf, Kuu, Matern32

    ell, var, c = _priors()
    k = Matern32(var, ell)
    Kmm = Kuu(feature, k).to_dense()
    L = jnp.linalg.cholesky(Kmm)
    v = numpyro.sample("f_v", dist.Normal(0.0, 1.0).expand([feature.num_features]).to_event(1))
    f = numpyro.deterministic("f", Kuf(feature, k, x[:, None]).T @ cho_solve((L, True), L @ v))
    numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)


def run(model, args, *, chains, warmup, samples, seed=0, chain_method="sequential"):
    """NUTS (:func:`~ppl_sparsegp.engines.fit_nuts`); CPU seconds include compilation."""
    import jax
    import numpy as np
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

    from inference.benchmarks.harness import gradient_cost
    from ppl_sparsegp.engines import fit_nuts

    with harness.clock() as c:
        mcmc, _ = fit_nuts(model, *args, rng_key=jax.random.PRNGKey(seed), num_warmup=warmup, num_samples=samples,
                           num_chains=chains, target_accept_prob=0.9, chain_method=chain_method,
                           extra_fields=("num_steps", "diverging"))
        s = mcmc.get_samples(group_by_chain=True)
        jax.block_until_ready(s)
    cpu, wall, compiling = c.cpu, c.wall, c.compile
    post = {}
    for k in HYPER:
        x = np.asarray(s[k])
        post[k] = {"mean": float(x.mean()), "sd": float(x.std()), "bulk_ess": float(effective_sample_size(x)),
                   "rhat": float(split_gelman_rubin(x))}
    lam = np.exp(np.asarray(s["f"]) + np.asarray(s["c"])[..., None]).reshape(-1, np.shape(s["f"])[-1])
    extra = mcmc.get_extra_fields()
    bulk = min(v["bulk_ess"] for v in post.values())
    compile_s, ms = gradient_cost(model, args)
    return {"cpu_s": cpu, "wall_s": wall, "fit_compile_s": compiling, "min_bulk_ess": bulk,
            "min_bulk_ess_per_cpu_s": bulk / cpu, "min_bulk_ess_per_sampling_cpu_s": bulk / (cpu - compiling),
            "max_rhat": max(v["rhat"] for v in post.values()), "divergences": int(np.sum(extra["diverging"])),
            "leapfrog_per_draw": float(np.mean(extra["num_steps"])), "compile_s": compile_s,
            "ms_per_gradient": ms, "posterior": post,
            "intensity_mean": lam.mean(0).tolist(), "intensity_sd": lam.std(0).tolist()}


def compare(row, exact):
    import numpy as np

    d = {k: abs(row["posterior"][k]["mean"] - exact["posterior"][k]["mean"]) / exact["posterior"][k]["sd"]
         for k in HYPER}
    curve = np.abs(np.subtract(row["intensity_mean"], exact["intensity_mean"])) / np.asarray(exact["intensity_sd"])
    return {"sd_distance": d, "max_sd_distance": max(d.values()), "intensity_max_sd_distance": float(curve.max())}


def with_distances(group, exact=None):
    """The rows of one basis count with their distances (:func:`compare`) to the exact GP's row, or, without
    it (``--no-exact``), to the group's first row (HSGP), which then has none."""
    ref = exact or group[0]
    return [{**r, **(compare(r, ref) if r is not ref else {})} for r in group]


COLUMNS = [("model", "name", ""), ("basis", "basis", "d"), ("min bulk ESS / CPU s", "min_bulk_ess_per_cpu_s", ".1f"),
           ("CPU s", "cpu_s", ".1f"), ("of which compiling", "fit_compile_s", ".1f"),
           ("min bulk ESS / sampling CPU s", "min_bulk_ess_per_sampling_cpu_s", ".1f"),
           ("gradient compile s", "compile_s", ".2f"), ("ms/gradient", "ms_per_gradient", ".3f"),
           ("leapfrog/draw", "leapfrog_per_draw", ".0f"), ("max R-hat", "max_rhat", ".3f")] + [
    (label, lambda r, k=k: r["posterior"][k]["mean"], ".3f")
    for label, k in zip(("ℓ", "σ²", "c"), HYPER)] + [
    ("max distance (sd)", "max_sd_distance", ".2f"),
    ("intensity max distance (sd)", "intensity_max_sd_distance", ".2f")]


def _fit_in_fresh_process(args, name, basis, seed):
    """Run one fit (``--fit NAME --seed S``) in a new Python process pinned like this one, so that every
    fit pays the compilation a user pays in a fresh session (in one process the second fit of a model
    re-uses the first one's compiled pieces). Returns the row it prints as its last line."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "inference.benchmarks.lgcp_1d", "--fit", name, "--seed", str(seed),
           "--basis", str(basis), "--bins", str(args.bins), "--chains", str(args.chains), "--warmup",
           str(args.warmup), "--samples", str(args.samples), "--cpu", str(args.cpu), "--out", str(args.out),
           "--chain-method", args.chain_method]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} (seed {seed}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bases(x):
    """(L, box) for the inputs x: HSGP's boundary L = c·S, c = max(1.2, 4.5 ℓ_min/S) with S the data's half-range
    (Riutort-Mayol et al. 2023), and VFF's box from :meth:`FourierFeatures.from_data` at ℓ_min."""
    from ppl_sparsegp import FourierFeatures, Matern32

    S = 0.5 * float(x.max() - x.min())
    return max(1.2, 4.5 * ELL_MIN / S) * S, FourierFeatures.from_data(x, Matern32(1.0, ELL_MIN))


def _models(x, y, n, L, box):
    """name -> model of the rows at n basis functions."""
    from ppl_sparsegp import FourierFeatures

    M = (n + 1) // 2
    feature = FourierFeatures(box.lower, box.upper, M)
    return {f"HSGP m={n}": lambda x, y: hsgp_model(x, y, n, L),
            f"VFF M={M}": lambda x, y: vff_model(x, y, feature),
            f"VFF square M={M}": lambda x, y: vff_square_model(x, y, feature)}


def summarise(name, basis, fits):
    """One table row from the per-seed fits: medians of the speed figures, the posterior pooled over the
    seeds (means and intensity curves averaged: each seed is an independent 2-chain run)."""
    import numpy as np

    med = lambda k: float(np.median([f.get(k, np.nan) for f in fits]))  # noqa: E731 (nan: not recorded)
    post = {k: {"mean": float(np.mean([f["posterior"][k]["mean"] for f in fits])),
                "sd": float(np.mean([f["posterior"][k]["sd"] for f in fits])),
                "bulk_ess": float(np.median([f["posterior"][k]["bulk_ess"] for f in fits])),
                "rhat": float(np.max([f["posterior"][k]["rhat"] for f in fits]))} for k in HYPER}
    return {"name": name, "basis": basis, "seeds": len(fits),
            **{k: med(k) for k in ("min_bulk_ess_per_cpu_s", "min_bulk_ess_per_sampling_cpu_s", "cpu_s",
                                   "fit_compile_s", "min_bulk_ess", "compile_s", "ms_per_gradient",
                                   "leapfrog_per_draw")},
            "min_bulk_ess_per_cpu_s_per_seed": [f["min_bulk_ess_per_cpu_s"] for f in fits],
            "max_rhat": max(f["max_rhat"] for f in fits), "divergences": sum(f["divergences"] for f in fits),
            "posterior": post, "intensity_mean": np.mean([f["intensity_mean"] for f in fits], 0).tolist(),
            "intensity_sd": np.mean([f["intensity_sd"] for f in fits], 0).tolist()}


def main(argv=None):
    p = harness.parser("lgcp_1d", __doc__)
    p.add_argument("--basis", type=int, nargs="*", default=None, help="basis functions (odd)")
    p.add_argument("--bins", type=int, default=None, help="default 200 (--quick: 100, so that the exact GP's "
                   "reference takes seconds)")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--samples", type=int, default=None)
    p.add_argument("--seeds", type=int, default=None, help="fits per model, each in a fresh process (default 20; "
                   "--quick 1): the table gives medians, as min bulk ESS varies by about ±40%% between seeds")
    p.add_argument("--square", action="store_true", help="also the VFF model whitened through the square "
                   "Cholesky factor of Kuu")
    p.add_argument("--exact", action="store_true", help="re-run the exact reference (else the stored one)")
    p.add_argument("--no-exact", action="store_true", help="no exact GP (for series too long for its N × N "
                   "Cholesky per gradient): the distances are then to the HSGP row at the same basis count")
    p.add_argument("--chain-method", choices=("sequential", "parallel"), default="sequential",
                   help="sequential (default) or parallel: one host device per chain, all on the pinned core")
    p.add_argument("--fit", default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.exact and args.no_exact:
        p.error("--exact re-runs the exact reference and --no-exact leaves it out: give one of them")
    parallel = args.chain_method == "parallel"
    args.bins = args.bins or (100 if args.quick else 200)
    if args.out is None and not args.quick and (parallel or args.bins != 200):  # keep lgcp_1d.json the default run's
        args.out = harness.RESULTS / ("lgcp_1d" + (f"_{args.bins}bins" if args.bins != 200 else "")
                                      + ("_parallel" if parallel else "") + ".jsonl")
    machine = harness.setup(args, devices=args.chains if parallel and args.fit is not None else 1)
    import jax.numpy as jnp

    args.warmup = args.warmup or (200 if args.quick else 300)
    args.samples = args.samples or (200 if args.quick else 600)
    seeds = args.seeds or (1 if args.quick else 20)
    basis = args.basis or ([31] if args.quick else [31, 61])
    x, y = simulate(args.bins)
    x, y = jnp.asarray(x), jnp.asarray(y)
    L, box = bases(x)
    kw = dict(chains=args.chains, warmup=args.warmup, samples=args.samples)
    if args.fit is not None:  # one fit, in the process the driver started: print its row
        import json

        model = exact_model if args.fit == "exact" else _models(x, y, basis[0], L, box)[args.fit]
        print(json.dumps(run(model, (x, y), seed=args.seed, chain_method=args.chain_method, **kw), default=float))
        return None
    settings = {**kw, "bins": args.bins, "ell_min": ELL_MIN, "hsgp_L": L, "box": [box.lower, box.upper],
                **({"chain_method": "parallel"} if parallel else {})}
    store = harness.Store(args.out, ["name", "seed"], settings=settings, resume=args.resume, merge=args.merge)
    print(f"{args.chains} chains x ({args.warmup} + {args.samples}), {args.bins} bins, {seeds} seeds per model, "
          f"each fit in a fresh process, cores {machine['cores']}")
    exact = None if args.exact or args.no_exact else _stored_exact(
        [args.out.with_suffix(".json"), harness.RESULTS / "lgcp_1d.json"], settings)
    if exact is None and not args.no_exact:
        if args.bins > 400 and not args.exact:  # its cost grows as N³: 451 CPU s at 200 bins
            raise SystemExit(f"lgcp_1d: no stored exact reference for {args.bins} bins, and running it would take "
                             f"hours (an N × N Cholesky per gradient): pass --no-exact, or --exact to run it anyway")
        print("exact reference: running it (minutes; stored in the results JSON)", flush=True)
        exact = {"name": "exact", "basis": args.bins, "seed": 0, **_fit_in_fresh_process(args, "exact", args.bins, 0)}
        store.add(exact)
    rows = [] if exact is None else [{**summarise("exact", args.bins, [exact]), **compare(exact, exact)}]
    for n in basis:
        group = []
        for name in _models(x, y, n, L, box):
            if name.startswith("VFF square") and not args.square:
                continue
            fits = []
            for seed in range(seeds):
                if not store.done(name, seed):
                    store.add({"name": name, "basis": n, "seed": seed, **_fit_in_fresh_process(args, name, n, seed)})
                fits.append(store.get(name, seed))
                print(f"{name} seed {seed}: {fits[-1]['min_bulk_ess_per_cpu_s']:.1f} min bulk ESS / CPU s", flush=True)
            group.append(summarise(name, n, fits))
        rows += with_distances(group, exact)
    print(harness.table(rows, COLUMNS))
    print("distances (sd): to " + ("the exact GP" if exact else "HSGP at the same basis count (--no-exact)"))
    ratios = {n: _ratio(rows, n) for n in basis}
    intervals = {n: _ratio_interval(rows, n) for n in basis}
    for n, r in ratios.items():
        lo, hi = intervals[n]
        print(f"basis {n}: VFF / HSGP median min bulk ESS per CPU s = {r:.2f} (95% seed-bootstrap interval "
              f"{lo:.2f}-{hi:.2f})")
    results = {"settings": settings, "seeds": seeds, "cores": machine["cores"], **machine,
               "vff_over_hsgp": {str(n): r for n, r in ratios.items()},
               "vff_over_hsgp_interval": {str(n): list(v) for n, v in intervals.items()}, "exact": exact,
               "distances_to": "exact" if exact else "hsgp",
               "rows": {r["name"]: r for r in rows}}
    store.write_json(results)
    return results


def _pair(rows, n):
    """(VFF row, HSGP row) at n basis functions."""
    by = {r["name"]: r for r in rows}
    return by[f"VFF M={(n + 1) // 2}"], by[f"HSGP m={n}"]


def _ratio(rows, n):
    vff, hsgp = _pair(rows, n)
    return vff["min_bulk_ess_per_cpu_s"] / hsgp["min_bulk_ess_per_cpu_s"]


def _ratio_interval(rows, n, draws=10_000, seed=0):
    """95% percentile bootstrap interval of :func:`_ratio` over the seeds: each model's per-seed figures
    resampled with replacement (the fits are independent), the ratio of the resampled medians."""
    import numpy as np

    vff, hsgp = (np.asarray(r["min_bulk_ess_per_cpu_s_per_seed"]) for r in _pair(rows, n))
    rng = np.random.default_rng(seed)
    med = lambda x: np.median(rng.choice(x, (draws, x.size)), axis=1)  # noqa: E731
    return tuple(float(q) for q in np.percentile(med(vff) / med(hsgp), [2.5, 97.5]))


def _stored_exact(paths, settings):
    """The exact reference stored in the first of these results JSONs run with these settings, the chain
    method aside (it does not change the posterior); else None."""
    import json
    from pathlib import Path

    same = lambda s: {k: v for k, v in s.items() if k != "chain_method"}  # noqa: E731
    want = same(json.loads(json.dumps(settings, default=float)))
    for path in map(Path, paths):
        if path.is_file():
            stored = json.loads(path.read_text())
            if same(stored.get("settings", {})) == want:
                return stored.get("exact") or stored.get("rows", {}).get("exact")
    return None


if __name__ == "__main__":
    main()
