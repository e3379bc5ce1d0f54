"""Pines LGCP: whitened VFF against the exact GP and a Kronecker HSGP, in the same run.

``python -m inference.benchmarks.pines [--quick] [--exact] [--basis 39 59 79] [--cpu N]``

Every model is the LGCP of ``models/pines.py`` (64 × 64 grid on [0, 1]², Poisson counts, product
Matérn-3/2 kernel with the paper-code priors: ℓ_d ~ Gamma(0.1, 1), σ₀² ~ Gamma(1, 1), σ₁² = 1,
c ~ N(0, 3)); only the prior on f differs:

* **exact**: the GP itself on the grid cells, whitened, f = L₀ V L₁ᵀ with the Cholesky factors of the
  two 64 × 64 Gram matrices (jitter 1e-6) and V ~ N(0, I). It is sampled until every hyperparameter has
  bulk ESS ≥ 400 and R-hat ≤ 1.01 (chains are extended in rounds), stored once in the results JSON
  (``exact``) and re-used; ``--exact`` re-runs it.
* **HSGP**: ``numpyro.contrib.hsgp``'s Laplacian eigenfunctions and ``diag_spectral_density_matern`` per
  axis, f = Φ₀ (s₀ s₁ᵀ ∘ W) Φ₁ᵀ with W ~ N(0, I) (m × m): the Kronecker construction a NumPyro user
  writes from those pieces; L = c·S with S = 0.5 the data half-range and Riutort-Mayol et al.'s (2023)
  rule c = max(1.2, 4.5 ℓ/S) at the smallest lengthscale of interest (c = 1.2 here).
* **VFF**: ``models/pines.py``'s ``SparseGP`` (whitened Kronecker Fourier features) on the box of
  :meth:`FourierFeatures.from_data`'s rule (3 ℓ_min beyond the data) with the projected process
  (``residual="none"``, the main job's choice) and with the expected log-likelihood over p(f | u)
  (``residual="expected"``, the variational MCMC of Hensman et al. 2015), and on the old box [−1, 2].

At each basis count per axis (``--basis``; VFF has 2M − 1 per axis) every row reports: NUTS (2 chains ×
(500 warm-up + 500 draws) by default, one process, chains one after another) min bulk ESS per second of
wall time including compilation, the compile time of one gradient and the ms per gradient (a jitted
value-and-gradient of the potential, timed apart from compilation), leapfrog steps per draw, R-hat, the
posterior means, and for every hyperparameter the distance to the exact posterior, |mean − exact mean| /
exact sd, and the sd ratio. Writes ``inference/benchmarks/results/pines.json`` and ``pines.png`` (distance
and ESS/s against the basis count).

``--gradients`` times only the gradient of the potential (the per-gradient target: VFF ≤ 1.2× the
Kronecker HSGP at equal basis count), HSGP and VFF (rule box, projected process: the main job's model)
at each basis count, in ``--rounds`` interleaved rounds of ``--repeats`` calls each (the median call of
each round; the table gives the median over rounds and the ratio of the medians), one process on one
core; writes ``results/pines_gradients.json``.
"""
from __future__ import annotations

import math
import time

from inference.benchmarks import harness

HYPER = ["kernel_0_variance", "kernel_0_lengthscale", "kernel_1_lengthscale", "mean"]
SHORT = {"kernel_0_variance": "σ₀²", "kernel_0_lengthscale": "ℓ₀", "kernel_1_lengthscale": "ℓ₁",
         "mean": "c"}
RESULTS = harness.RESULTS / "pines.json"  # holds the stored exact reference (``--exact``)
HSGP_C = 1.2  # Riutort-Mayol et al. (2023): c = max(1.2, 4.5 ℓ/S) for Matérn-3/2; 1.2 for ℓ ≤ 0.13
# every chain of every model starts the hyperparameters at models/pines.py's INIT (the latent sites
# uniformly in (−2, 2)): from init_to_median (ℓ ≈ 6e-4, far below a cell) a chain of the exact model
# never moved (measured: 0 accepted moves in 2500 iterations)


def _priors():
    import numpyro
    import numpyro.distributions as dist

    v0 = numpyro.sample("kernel_0_variance", dist.Gamma(1.0, 1.0))
    l0 = numpyro.sample("kernel_0_lengthscale", dist.Gamma(0.1, 1.0))
    l1 = numpyro.sample("kernel_1_lengthscale", dist.Gamma(0.1, 1.0))
    c = numpyro.sample("mean", dist.Normal(0.0, math.sqrt(3.0)))
    return v0, l0, l1, c


def exact_model(axes, y, jitter=1e-6):
    """The exact LGCP on the grid, whitened: f = L₀ V L₁ᵀ, V ~ N(0, I)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    from ppl_sparsegp import Matern32

    v0, l0, l1, c = _priors()
    Ls = [jnp.linalg.cholesky(k(a[:, None]) + jitter * jnp.eye(a.shape[0]))
          for k, a in zip((Matern32(v0, l0), Matern32(1.0, l1)), axes)]
    V = numpyro.sample("f_v", dist.Normal(0.0, 1.0).expand([a.shape[0] for a in axes]).to_event(2))
    f = (Ls[0] @ V @ Ls[1].T).reshape(-1)
    numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)


def hsgp_model(axes, y, m, ell):
    """The LGCP with a Kronecker HSGP built from ``numpyro.contrib.hsgp`` pieces (m per axis, box ±ell
    around the centre 0.5)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.hsgp.laplacian import eigenfunctions
    from numpyro.contrib.hsgp.spectral_densities import diag_spectral_density_matern

    v0, l0, l1, c = _priors()
    phis = [eigenfunctions(a - 0.5, ell=ell, m=m) * jnp.sqrt(
        diag_spectral_density_matern(1.5, v, ls, ell, m, 1)) for a, v, ls in zip(axes, (v0, 1.0), (l0, l1))]
    W = numpyro.sample("f_w", dist.Normal(0.0, 1.0).expand([m, m]).to_event(2))
    f = (phis[0] @ W @ phis[1].T).reshape(-1)
    numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)


def gradient_table(spec, basis, ell_min, *, rounds, repeats):
    """Rows of the ``--gradients`` mode: ms per gradient of HSGP and VFF (rule box, projected) per basis
    count, interleaved rounds (the machine's drift hits both alike)."""
    import jax
    import numpy as np
    from numpyro.infer.util import initialize_model

    from ppl_sparsegp import FourierFeatures, Matern32

    rule = FourierFeatures.from_data([1 / 128, 127 / 128], Matern32(1.0, ell_min))
    rows = []
    for n in basis:
        compiled = {}
        for kind, size, box, residual in (("hsgp", n, HSGP_C * 0.5, None),
                                          ("vff", (n + 1) // 2, (rule.lower, rule.upper), "none")):
            model, args = build_model(kind, size, box, spec, residual)
            info = initialize_model(jax.random.PRNGKey(0), model, model_args=args)
            z = info.param_info.z
            compiled[kind] = (*harness.compile_timed(jax.value_and_grad(info.potential_fn), z), z)
        ms = {kind: [] for kind in compiled}
        for _ in range(rounds):
            for kind, (fn, _, z) in compiled.items():
                ms[kind].append(1e3 * float(np.median(harness.call_times(fn, z, repeats=repeats))))
        med = {kind: float(np.median(v)) for kind, v in ms.items()}
        rows.append({"basis": n, "hsgp_ms": med["hsgp"], "vff_ms": med["vff"], "ratio": med["vff"] / med["hsgp"],
                     "ratio_per_round": [v / h for v, h in zip(ms["vff"], ms["hsgp"])],
                     "hsgp_compile_s": compiled["hsgp"][1], "vff_compile_s": compiled["vff"][1]})
        print(f"basis {n}: HSGP {med['hsgp']:.3f} ms, VFF {med['vff']:.3f} ms, ratio {rows[-1]['ratio']:.2f}",
              flush=True)
    return rows


GRADIENT_COLUMNS = [("basis / axis", "basis", "d"), ("HSGP ms/gradient", "hsgp_ms", ".3f"),
                    ("VFF ms/gradient", "vff_ms", ".3f"), ("VFF / HSGP", "ratio", ".2f"),
                    ("ratio range over rounds", lambda r: f"{min(r['ratio_per_round']):.2f}–"
                     f"{max(r['ratio_per_round']):.2f}", ""),
                    ("HSGP compile s", "hsgp_compile_s", ".2f"), ("VFF compile s", "vff_compile_s", ".2f")]


def _posterior_stats(draws: dict) -> dict:
    """mean, sd, bulk/tail ESS and split R-hat of each hyperparameter from (chains, draws) arrays."""
    import numpy as np
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

    out = {}
    for k in HYPER:
        x = np.asarray(draws[k])
        q5, q95 = np.quantile(x, [0.05, 0.95])
        tail = min(effective_sample_size((x <= q5).astype(float)), effective_sample_size((x <= q95).astype(float)))
        out[k] = {"mean": float(x.mean()), "sd": float(x.std()), "bulk_ess": float(effective_sample_size(x)),
                  "tail_ess": float(tail), "rhat": float(split_gelman_rubin(x)) if x.shape[0] > 1 else float("nan")}
    return out


def run_nuts(model, args, *, chains, warmup, samples, seed=0, target_ess=None, max_rounds=1, parallel=False,
             chain_method=None):
    """NUTS (target acceptance 0.9, started at ``models.pines.INIT``; :func:`~ppl_sparsegp.engines.fit_nuts`), chains
    one after another (or in parallel on as many host devices; ``chain_method`` overrides either, e.g.
    ``"vectorized"``: every chain on one device, as on a GPU). With ``target_ess`` the chains are extended
    by ``samples`` draws per round (from the adapted state) until every hyperparameter has bulk ESS ≥
    target_ess and R-hat ≤ 1.01, at most ``max_rounds`` rounds."""
    import jax
    import numpy as np
    from numpyro.infer import init_to_value

    from models.pines import INIT
    from ppl_sparsegp.engines import fit_nuts

    draws, steps, divergences = {k: [] for k in HYPER}, [], 0
    extra_fields = ("diverging", "num_steps")
    t0 = time.perf_counter()
    for round_ in range(max_rounds):
        if round_ == 0:
            mcmc, _ = fit_nuts(model, *args, rng_key=jax.random.PRNGKey(seed), num_warmup=warmup,
                               num_samples=samples, num_chains=chains, target_accept_prob=0.9,
                               init_strategy=init_to_value(values=INIT),
                               chain_method=chain_method or ("parallel" if parallel else "sequential"),
                               extra_fields=extra_fields)
        else:
            mcmc.post_warmup_state = mcmc.last_state
            mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=extra_fields)
        s = mcmc.get_samples(group_by_chain=True)
        jax.block_until_ready(s)
        for k in HYPER:
            draws[k].append(np.asarray(s[k]))
        extra = mcmc.get_extra_fields()
        steps.append(np.asarray(extra["num_steps"]))
        divergences += int(np.sum(extra["diverging"]))
        stats = _posterior_stats({k: np.concatenate(v, axis=1) for k, v in draws.items()})
        if target_ess is None or all(v["bulk_ess"] >= target_ess and v["rhat"] <= 1.01 for v in stats.values()):
            break
    wall = time.perf_counter() - t0
    bulk = min(v["bulk_ess"] for v in stats.values())
    return {"wall_s": wall, "divergences": divergences, "leapfrog_per_draw": float(np.mean(np.concatenate(steps))),
            "draws_per_chain": int(sum(d.shape[1] for d in draws[HYPER[0]])), "chains": chains, "warmup": warmup,
            "min_bulk_ess": bulk, "min_bulk_ess_per_s": bulk / wall,
            "max_rhat": max(v["rhat"] for v in stats.values()), "posterior": stats}


def distance(row: dict, exact: dict) -> dict:
    """Per hyperparameter: |mean − exact mean| / exact sd and sd / exact sd."""
    out = {}
    for k in HYPER:
        e, r = exact["posterior"][k], row["posterior"][k]
        out[k] = {"sd_distance": abs(r["mean"] - e["mean"]) / e["sd"], "sd_ratio": r["sd"] / e["sd"]}
    return out


def configurations(basis: list, ell_min: float):
    """(name, kind, per-axis size, box, residual) rows: the main job, then per basis count HSGP and VFF
    (rule box with the projected process and with the expected log-likelihood, and the old [−1, 2])."""
    from models import pines
    from ppl_sparsegp import FourierFeatures, Matern32

    d = pines.default_feature()
    rows = [(f"VFF main job: M={d.num_frequencies}, box [{d.lower:.2f}, {d.upper:.2f}], {pines.RESIDUAL} "
             "(models/pines.py)",
             "vff", d.num_frequencies, (d.lower, d.upper), pines.RESIDUAL)]
    rule = FourierFeatures.from_data([1 / 128, 127 / 128], Matern32(1.0, ell_min))  # the box; M: the basis count
    for n in basis:
        M = (n + 1) // 2
        rows.append((f"HSGP m={n}", "hsgp", n, HSGP_C * 0.5, None))
        box_of_rule = (rule.lower, rule.upper)
        for box, residual in ((box_of_rule, "none"), (box_of_rule, "expected"), ((-1.0, 2.0), "expected")):
            rows.append((f"VFF M={M}, box [{box[0]:.2f}, {box[1]:.2f}], {residual}", "vff", M, box, residual))
    return rows


def build_model(kind, size, box, spec, residual=None):
    """(model, args) for one configuration on the pines data of ``spec``."""
    from models import pines
    from ppl_sparsegp import FourierFeatures

    axes = spec.X.axes
    if kind == "exact":
        return exact_model, (axes, spec.y)
    if kind == "hsgp":
        return (lambda a, y: hsgp_model(a, y, size, box)), (axes, spec.y)
    gp = pines.make_gp(feature=FourierFeatures(box[0], box[1], size), residual=residual)
    return gp.model, (spec.X, spec.y)


def plot(results: dict, path):
    """Distance to the exact posterior and min bulk ESS/s against the basis count, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict = {}
    for name, r in results["rows"].items():
        if "main job" in name:
            continue
        label = ("HSGP (Kronecker, numpyro.contrib.hsgp)" if r["kind"] == "hsgp" else
                 f"VFF {r['residual']}, box [{r['box'][0]:.2f}, {r['box'][1]:.2f}]")
        groups.setdefault(label, []).append((_basis(r), max(v["sd_distance"] for v in r["distance"].values()),
                                             r["min_bulk_ess_per_s"]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, pts in sorted(groups.items()):
        pts.sort()
        for ax, i in zip(axes, (1, 2)):
            ax.plot([p[0] for p in pts], [p[i] for p in pts], marker="o", label=label)
    axes[0].axhline(0.3, color="grey", ls="--", lw=1)
    axes[0].set_ylabel("max |mean − exact mean| / exact sd")
    axes[1].set_ylabel("min bulk ESS per second (1 core)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("basis functions per axis")
    axes[0].legend(fontsize=7)
    fig.suptitle("pines LGCP: distance to the exact GP posterior and sampling speed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _basis(row):
    """Basis functions per axis of a stored row (the exact GP: the grid)."""
    kind = row.get("kind", "exact")
    return 64 if kind == "exact" else row["size"] if kind == "hsgp" else 2 * row["size"] - 1


def _exact_line(exact):
    return (f"exact reference: {exact['chains']} chains x {exact['draws_per_chain']} draws, min bulk ESS "
            f"{exact['min_bulk_ess']:.0f}, max R-hat {exact['max_rhat']:.3f}, {exact['wall_s']:.0f} s; "
            + ", ".join(f"{SHORT[k]} {v['mean']:.3f} ± {v['sd']:.3f}" for k, v in exact["posterior"].items()))


def _distance(r):
    d = r.get("distance")
    return None if not d else (f"{max(v['sd_distance'] for v in d.values()):.2f} ("
                               + ", ".join(f"{SHORT[k]} {v['sd_distance']:.2f}" for k, v in d.items()) + ")")


COLUMNS = [("model", "name", ""), ("basis/axis", _basis, "d"),
           ("min bulk ESS/s (wall incl. compile)", "min_bulk_ess_per_s", ".2f"), ("compile s", "compile_s", ".1f"),
           ("ms/gradient", "ms_per_gradient", ".3f"), ("leapfrog/draw", "leapfrog_per_draw", ".0f"),
           ("max R-hat", "max_rhat", ".3f"), ("div", "divergences", "d")] + [
    (SHORT[k], lambda r, k=k: r["posterior"][k]["mean"], ".3f")
    for k in ("kernel_0_lengthscale", "kernel_1_lengthscale", "kernel_0_variance", "mean")] + [
    ("max distance (sd of exact)", _distance, ""),
    ("sd ratio (σ₀², ℓ₀, ℓ₁, c)", lambda r: ", ".join(f"{v['sd_ratio']:.2f}" for v in r["distance"].values())
     if r.get("distance") else None, "")]


def main(argv=None):
    p = harness.parser("pines", __doc__)
    p.add_argument("--exact", action="store_true",
                   help="only (re-)compute the exact reference, 4 chains in parallel on every core, and store it")
    p.add_argument("--basis", type=int, nargs="*", default=None,
                   help="basis functions per axis (odd; default 39 59 79; none: only the main job's row)")
    p.add_argument("--ell-min", type=float, default=0.03,
                   help="smallest lengthscale of interest for the VFF box rule (default %(default)s)")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--samples", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gradients", action="store_true",
                   help="only time the gradients of HSGP and VFF per basis count (results/pines_gradients.json)")
    p.add_argument("--rounds", type=int, default=5, help="--gradients: interleaved rounds (default %(default)s)")
    p.add_argument("--repeats", type=int, default=1000, help="--gradients: calls per round (default %(default)s)")
    args = p.parse_args(argv)
    machine = harness.setup(args, devices=4)  # the exact reference's parallel chains (rows run one chain at a time)
    import json
    import os
    from types import SimpleNamespace

    from models import pines

    warmup = args.warmup or (100 if args.quick else 500)
    samples = args.samples or (100 if args.quick else 500)
    basis = args.basis if args.basis is not None else ([39] if args.quick else [39, 59, 79])
    spec = pines.build(SimpleNamespace(grid=64))
    if args.gradients:
        rows = gradient_table(spec, basis, args.ell_min, rounds=args.rounds, repeats=args.repeats)
        print("\n" + harness.table(rows, GRADIENT_COLUMNS))
        out = (args.out.parent if args.out else RESULTS.parent) / "pines_gradients.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"load_average": os.getloadavg(), **machine, "rounds": args.rounds,
                                   "repeats": args.repeats, "ell_min": args.ell_min, "rows": rows}, indent=1) + "\n")
        print(f"wrote {out}")
        return rows
    settings = {"chains": args.chains, "warmup": warmup, "samples": samples, "ell_min": args.ell_min,
                "hsgp_c": HSGP_C, "seed": args.seed}
    store = harness.Store(args.out, ["name"], settings=settings, resume=args.resume, merge=args.merge)
    references = harness.Store(args.out, ["name"], settings={"reference": "exact", "seed": args.seed})

    if args.exact:
        print("exact reference: 4 parallel chains x (1000 warm-up + rounds of 1000 draws) until every bulk "
              "ESS >= 400 and R-hat <= 1.01", flush=True)
        model, a = build_model("exact", 64, None, spec)
        r = run_nuts(model, a, chains=4, warmup=1000, samples=1000, seed=args.seed, target_ess=400, max_rounds=5,
                     parallel=True)
        r["compile_s"], r["ms_per_gradient"] = harness.gradient_cost(model, a)
        r["cores"] = machine["cores"]
        exact = references.add({"name": "exact", **r})
        print(_exact_line(exact))
    else:
        exact = references.get("exact")
        if exact is None and RESULTS.is_file():  # the committed reference
            exact = json.loads(RESULTS.read_text()).get("exact")
        if exact is None:
            raise SystemExit(f"no exact reference in {args.out} or {RESULTS}: run "
                             "`python -m inference.benchmarks.pines --exact` first")
        print(_exact_line(exact))
        print(f"\n{args.chains} chains x ({warmup} warm-up + {samples} draws), one process, cores "
              f"{machine['cores']}\n")
        names = []
        for name, kind, size, box, residual in configurations(basis, args.ell_min):
            names.append(name)
            if store.done(name):
                continue
            model, a = build_model(kind, size, box, spec, residual)
            r = run_nuts(model, a, chains=args.chains, warmup=warmup, samples=samples, seed=args.seed)
            r["compile_s"], r["ms_per_gradient"] = harness.gradient_cost(model, a)
            r["distance"] = distance(r, exact)
            r.update(name=name, kind=kind, size=size, box=box, residual=residual)
            store.add(r)
            print(f"{name}: min bulk ESS/s {r['min_bulk_ess_per_s']:.2f}, max distance {_distance(r)}", flush=True)
        reference_row = {**exact, "name": "exact GP, whitened Kronecker Cholesky (reference run: 4 chains in "
                         "parallel on 2 cores)"}
        print("\n" + harness.table([reference_row] + [store.get(n) for n in names], COLUMNS))
        if len(store.rows) > len(names):
            print("\nall stored rows (this run's and earlier runs' at the same settings):\n")
            print(harness.table([reference_row] + sorted(store.rows, key=lambda r: (_basis(r), r["name"])), COLUMNS))
    results = {"load_average": os.getloadavg(), **machine, "settings": settings, "exact": exact,
               "rows": {r["name"]: r for r in store.rows}}
    path = store.write_json(results)
    if not args.quick and store.rows:
        plot(results, path.with_suffix(".png"))
        print(f"wrote {path.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
