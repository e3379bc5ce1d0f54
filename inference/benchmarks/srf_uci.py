"""Stein random feature regression on UCI data: the protocol of Table 1 of Warren et al. (2024).

Data sets airfoil, concrete, energy and wine (``models.uci_ssgp``: ``$PPL_SPARSEGP_DATA/srf``), a fresh
random split per seed (10 % test for airfoil and wine, 20 % for concrete and energy), inputs min–max
scaled (wine: standardised) and targets standardised with training statistics only; the paper's R
(frequencies) and M (particles) per data set; 1000 iterations for every iterative model except SVGP
(3500 airfoil, 4000 energy, 1000 otherwise), as in the authors' code [2, §2.2].

Methods (all in float64, hyperparameters chosen without test data):

* ``msrfr``: M-SRFR through ``numpyro.contrib.einstein.SteinVI`` (``ppl_sparsegp.stein.fit_msrfr``)
  with the authors' tuned settings (their 5-fold CV on training data: σ², step sizes, α, annealing s;
  likelihood tempered by 1/M as in their code); mixture predictive of the M particles.
* ``ssgp``: sparse-spectrum GP with frequencies and lengthscales learned by maximum likelihood (SVI,
  AdamW with the data set's tuned M-SRFR particle step for Ω and
  0.05 for ℓ, starting at 1), σ² fixed at the data set's cross-validated value (the paper's
  baselines tune σ² by CV too; learned jointly with Ω it collapses and the fit interpolates);
  frequencies start at a scrambled-Halton draw of N(0, I).
* ``ssgp_rbf``: the same with the frequencies fixed at the Halton draw (only ℓ learned).
* ``svgp``: our inducing-point SVGP (``SparseGP(InducingPoints)``, R inducing inputs initialised at
  random training inputs and learned, ARD squared exponential, Gaussian likelihood, Adam 0.01).

Metrics per run: RMSE in original units, NLPD per test point (mixture density, standardised y) and the
paper's joint-mixture NLPD (summed over the test set, standardised y; for one component it is the
summed per-point NLPD), training time (compilation included) and its ratio to SSGP's in the same run.

``python -m inference.benchmarks.srf_uci [--quick] [--splits N] [--datasets a,b] [--methods m1,m2]``
stores every run as soon as it is done (``results/srf_uci.jsonl``; ``--resume`` skips the runs already
stored), writes ``results/srf_uci.json`` and prints a Markdown table. Splits can run in parallel processes
(``--first-split``, ``--splits``, ``--out`` and ``--cpu`` per process) and be combined with
``--merge a.jsonl b.jsonl --splits 0``. Pin each process to its own core (``--cpu``): on a 2-core machine
two unpinned single-threaded processes took 2.2 times as long per SSGP step as two pinned ones.

Runs with learned frequencies (``msrfr``, ``ssgp``) are deterministic for a given number of usable cores
but not across them: XLA's CPU code, and so the floating-point summation order, depends on the cores a
process may use, and 1000 steps of these optimisations amplify the last-bit differences. Concrete SSGP
split 0 ends at RMSE 5.68 pinned to one core and 6.52 on two. The stored results were all made pinned
to one core (``taskset``; runs made with ``--cpu`` record their ``cores``).

References:
    1. Warren, Oliveira, Ramos (2024), Stein random feature regression, UAI.
    2. ``shared/notes/srf.md``.
"""
from __future__ import annotations

import os

from inference.benchmarks import harness

DATASETS = ("airfoil", "concrete", "energy", "wine")
METHODS = ("msrfr", "ssgp", "ssgp_rbf", "svgp")
SVGP_STEPS = {"airfoil": 3500, "energy": 4000}

#: Table 1 of the paper (mean ± sd over 10 seeds; notes §2.2): RMSE in original units, joint NLPD
PAPER = {
    "rmse": {
        "msrfr": {"airfoil": (1.88, 0.27), "concrete": (4.13, 0.72), "energy": (0.29, 0.04), "wine": (0.59, 0.04)},
        "ssgp": {"airfoil": (2.41, 0.53), "concrete": (5.03, 0.74), "energy": (0.37, 0.05), "wine": (0.87, 0.04)},
        "ssgp_rbf": {"airfoil": (2.90, 0.60), "concrete": (5.74, 0.58), "energy": (0.48, 0.03),
                     "wine": (0.82, 0.08)},
        "svgp": {"airfoil": (2.36, 0.24), "concrete": (6.35, 0.69), "energy": (2.72, 0.17), "wine": (0.62, 0.04)},
    },
    "nlpd_joint": {
        "msrfr": {"airfoil": (454.3, 134.5), "concrete": (113.9, 77.3), "energy": (-283.7, 38.4),
                  "wine": (1882.5, 205.3)},
        "ssgp": {"airfoil": (216.0, 159.9), "concrete": (23.1, 14.0), "energy": (-288.0, 23.9),
                 "wine": (783.9, 82.3)},
        "ssgp_rbf": {"airfoil": (780.5, 457.0), "concrete": (36.3, 11.8), "energy": (-249.4, 8.7),
                     "wine": (791.1, 160.7)},
        "svgp": {"airfoil": (487.0, 203.4), "concrete": (272.8, 120.3), "energy": (993.6, 205.3),
                 "wine": (2334.9, 457.0)},
    },
}


def _data(name, seed):
    import jax.numpy as jnp

    from models import uci_ssgp
    from ppl_sparsegp.datasets import standardise

    Xtr, ytr, Xte, yte = uci_ssgp.split(name, seed)
    Xtr, ytr, Xte, yte, scaler = standardise(Xtr, ytr, Xte, yte, x_scaling=uci_ssgp.DATASETS[name]["x_scaling"])
    return jnp.asarray(Xtr), jnp.asarray(ytr), jnp.asarray(Xte), jnp.asarray(yte), scaler["y_sd"]


def fit_msrfr(name, seed, steps):
    import jax

    from models import uci_ssgp
    from ppl_sparsegp.diagnostics import mixture_metrics
    from ppl_sparsegp.stein import fit_msrfr

    X, y, Xs, ys_, yscale = _data(name, seed)
    gp = uci_ssgp.make_gp(name, X)
    with harness.clock() as fit_time:  # compilation included
        res = fit_msrfr(gp, X, y, jax.random.PRNGKey(seed), **uci_ssgp.msrfr_settings(name, steps))
        jax.block_until_ready(res.params)
    out = gp.predict_particles(Xs, X, y, res.values())
    m = mixture_metrics(ys_, out["f_mean_draws"], out["y_var_draws"], y_scale=yscale)
    return {**m, "time_s": fit_time.wall, "final_stein_force": float(res.losses[-1])}


def fit_ssgp(name, seed, steps, learn_frequencies=True):
    import jax
    import numpyro.distributions as dist
    from numpyro.infer import Trace_ELBO

    from models import uci_ssgp
    from ppl_sparsegp import Gaussian, Param, SquaredExponential
    from ppl_sparsegp.approximations.spectrum import SparseSpectrumGP
    from ppl_sparsegp.diagnostics import mixture_metrics
    from ppl_sparsegp.engines import fit_svi
    from ppl_sparsegp.features.random_fourier import sample_frequencies
    from ppl_sparsegp.stein import AdamW

    cfg = uci_ssgp.DATASETS[name]
    X, y, Xs, ys_, yscale = _data(name, seed)
    W0 = sample_frequencies(SquaredExponential, jax.random.PRNGKey(1000 + seed), cfg["R"], X.shape[1], "qmc")
    # ℓ starts at 1 (inputs scaled to [0, 1] or standardised). From the authors' median init (the median
    # of *squared* differences: ℓ ≈ 0.005–0.1 on airfoil and concrete) fixed or gradient-learned
    # frequencies see a white-noise-like random-feature kernel whose likelihood surface in ℓ is rough;
    # 1000 Adam steps do not escape it (airfoil / concrete test RMSE 7.0 / 17, above the targets' sd).
    kernel = SquaredExponential(1.0, Param(jax.numpy.ones(X.shape[1]), dist.constraints.positive))
    # σ² fixed at the data set's cross-validated value, as in the paper (its SSGP baselines tune σ² by CV
    # and learn only Ω and ℓ): learned by maximum likelihood together with Ω it collapses and the
    # sparse-spectrum fit interpolates (concrete: test RMSE above the targets' sd)
    gp = SparseSpectrumGP(kernel, Gaussian(cfg["noise"]), frequencies=Param(W0) if learn_frequencies else W0)
    # step sizes: Ω takes the data set's tuned M-SRFR particle step, ℓ a common 0.05 (M-SRFR's shared
    # steps were tuned for the median init: airfoil's 0.0027 would leave ℓ where it starts); AdamW as in
    # the authors' code
    optim = AdamW(lambda p: cfg["lr"] if p == "feature_frequencies" else 0.05, weight_decay=1e-4)
    res, t = fit_svi(gp, X, y, num_steps=steps, optim=optim, elbo=Trace_ELBO(), rng_key=jax.random.PRNGKey(seed))
    out = gp.with_data(X, y).predict(Xs, params=res.params)
    m = mixture_metrics(ys_, out["y_mean"][None], out["y_var"][None], y_scale=yscale)
    return {**m, "time_s": t, "final_loss": float(res.losses[-1]), "noise": float(cfg["noise"]),
            "lengthscale": [float(v) for v in res.params["kernel_lengthscale"]]}


def fit_svgp(name, seed, steps, lr=0.01):
    import jax
    import numpy as np
    import numpyro.distributions as dist

    from models import uci_ssgp
    from ppl_sparsegp import Gaussian, InducingPoints, Param, SparseGP, SquaredExponential
    from ppl_sparsegp.diagnostics import mixture_metrics
    from ppl_sparsegp.engines import fit_svi

    cfg = uci_ssgp.DATASETS[name]
    X, y, Xs, ys_, yscale = _data(name, seed)
    Z = np.asarray(X)[np.random.default_rng(seed).choice(X.shape[0], cfg["R"], replace=False)]
    pos = dist.constraints.positive
    kernel = SquaredExponential(Param(1.0, pos), Param(np.sqrt(uci_ssgp.initial_lengthscale(X, name)) + 0.1, pos))
    gp = SparseGP(InducingPoints(Param(Z)), kernel, Gaussian(Param(0.1, pos)))
    res, t = fit_svi(gp, X, y, num_steps=steps, lr=lr, rng_key=jax.random.PRNGKey(seed))
    out = gp.predict(Xs, params=res.params)
    m = mixture_metrics(ys_, out["y_mean"][None], out["y_var"][None], y_scale=yscale)
    return {**m, "time_s": t, "final_loss": float(res.losses[-1])}


def run_one(method, name, seed, steps):
    if method == "msrfr":
        return fit_msrfr(name, seed, steps)
    if method == "ssgp":
        return fit_ssgp(name, seed, steps, True)
    if method == "ssgp_rbf":
        return fit_ssgp(name, seed, steps, False)
    svgp_steps = SVGP_STEPS.get(name, 1000) if steps == 1000 else steps
    return {**fit_svgp(name, seed, svgp_steps), "steps": svgp_steps}


def summarise(runs):
    import numpy as np

    table = {}
    for r in runs:
        table.setdefault(r["dataset"], {}).setdefault(r["method"], []).append(r)
    out = {}
    for name, by_method in table.items():
        ref = by_method.get("ssgp")
        ref_time = np.mean([r["time_s"] for r in ref]) if ref else None
        for method, rs in by_method.items():
            row = {"splits": len(rs)}
            for key in ("rmse", "nlpd_point", "nlpd_joint", "time_s"):
                v = np.array([r[key] for r in rs])
                row[key] = (float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0)
            row["time_ratio_vs_ssgp"] = None if ref_time is None else row["time_s"][0] / ref_time
            paper = PAPER["rmse"].get(method, {}).get(name)
            if paper is not None:
                row["paper_rmse"] = paper
                # target: at or below the paper's RMSE within one (paper) standard deviation
                row["meets_paper_rmse"] = bool(row["rmse"][0] <= paper[0] + paper[1])
            out.setdefault(name, {})[method] = row
    return out


def markdown(summary):
    rows = [{"dataset": name, "method": method, **summary[name][method]}
            for name in DATASETS for method in METHODS if method in summary.get(name, {})]
    paper = {k: (lambda r, k=k: PAPER[k][r["method"]][r["dataset"]]) for k in ("rmse", "nlpd_joint")}
    return harness.table(rows, [
        ("data set", "dataset", ""), ("method", "method", ""), ("splits", "splits", "d"),
        ("RMSE (ours)", "rmse", harness.pm(3, always=True)),
        ("RMSE (paper)", paper["rmse"], harness.pm(2, always=True)),
        ("NLPD/point", "nlpd_point", harness.pm(3, always=True)),
        ("NLPD joint (ours)", "nlpd_joint", harness.pm(1, always=True)),
        ("NLPD joint (paper)", paper["nlpd_joint"], harness.pm(1, always=True)),
        ("train s/run", lambda r: r["time_s"][0], ".0f"), ("× SSGP", "time_ratio_vs_ssgp", ".1f")])


def main(argv=None):
    p = harness.parser("srf_uci", __doc__)
    p.add_argument("--splits", type=int, default=10, help="random splits (seeds 0..N-1) per data set")
    p.add_argument("--first-split", type=int, default=0, help="first seed")
    p.add_argument("--datasets", default=None, help="comma-separated (default: all; with --quick: concrete)")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--steps", type=int, default=1000, help="iterations (SVGP: its own defaults at 1000)")
    args = p.parse_args(argv)
    if args.quick:
        args.splits, args.steps = 1, 60
    if args.datasets is None:
        args.datasets = "concrete" if args.quick else ",".join(DATASETS)
    datasets = [d for d in args.datasets.split(",") if d]
    methods = [m for m in args.methods.split(",") if m]
    for d in datasets:
        if d not in DATASETS:
            raise ValueError(f"unknown dataset {d!r}; choose from {DATASETS}")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {METHODS}")
    machine = harness.setup(args, one_thread=True)
    import jax

    # splits of one data set trace to the same XLA program (data are arguments): compile it once
    jax.config.update("jax_compilation_cache_dir", os.environ.get("SRF_UCI_XLA_CACHE", "/tmp/srf_uci_xla_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    store = harness.Store(args.out, ["dataset", "method", "split"], settings={"steps": args.steps},
                          resume=args.resume, merge=args.merge)
    for seed in range(args.first_split, args.first_split + args.splits):
        for name in datasets:
            for method in methods:
                if store.done(name, method, seed):
                    continue
                r = run_one(method, name, seed, args.steps)
                r.update(dataset=name, method=method, split=seed, steps_setting=args.steps, cores=machine["cores"])
                store.add(r)
                print(f"{name:9s} {method:9s} split {seed}: RMSE {r['rmse']:.4f}  NLPD/pt {r['nlpd_point']:.3f}  "
                      f"NLPD joint {r['nlpd_joint']:.1f}  {r['time_s']:.0f} s", flush=True)
    summary = summarise(store.rows)
    print(markdown(summary))
    store.write_json({"benchmark": "srf_uci", "quick": args.quick, "steps": args.steps, "runs": store.rows,
                      "summary": summary, "paper": PAPER, **machine})
    return summary


if __name__ == "__main__":
    main()
