r"""GPU figures: the library's main workloads on one accelerator, in one process, compilation timed apart.

``python -m inference.benchmarks.gpu [--quick] [--out DIR] [--parts hkd,svgp,airline,float32,pines]``

Five parts, run in this order (the most wanted first and the one whose GPU time is least certain, the
pines NUTS runs, last, so that a run stopped at its time limit keeps the others); each part's result is
stored as soon as it is done (``gpu.jsonl``) and the summary ``gpu.json`` is rewritten after every part
(and after each of the pines runs), with the device (``device``, e.g. "NVIDIA H100 80GB HBM3"), JAX's,
NumPyro's, PyTorch's and GPyTorch's versions. A part that raises is recorded (``error``) and the next
one runs. Every time is wall-clock (on a GPU the process CPU time is not the cost), each call blocked
until its result is ready; compilation is timed apart (``harness.clock``'s compile seconds, or the
first call).

1. **hkd**: the harmonic kernel decomposition's time per SVI step at the UCI benchmark's settings
   (``hkd_uci.py``: m = 32, batch 256, Adam 0.01, the same steps for every method, fitted in
   interleaved blocks): SVGP-m, SVGP-2m and HVGP 8×m on protein, kin8nm and power-plant (split 0), with
   the minibatch draw's own cost (``subsample_ms``) and the ratios without it. The target: HVGP 8×m at
   most 1.5× SVGP-m's time per step (``targets``, over the three data sets; the stored CPU ratios
   beside). The UCI files live in ``../shared/data``, which does not travel to the GPU machine: where
   they are not found, each set is a synthetic stand-in of the same N, D and test size (``data_source``
   says which; the times depend on N, D, m and the batch, not on the values, but the test RMSE/NLPD of
   a stand-in say nothing about the paper's accuracy claims). Steps: 300 (the median step time needs no
   more; the CPU benchmark's 3000 were for the test errors). ``--quick``: m = 8, 60 steps, kin8nm only.
2. **svgp**: SVGP with inducing points (full q(u), whitened; ``models/uci_hkd.py``'s model, k-means
   initialisation) at M = 1000 and 4000 on protein (or its stand-in), ms per step, against GPyTorch's
   SVGP on the same data, Z, initial hyperparameters, batch, optimiser and dtype (float64), in the same
   run: ``VariationalStrategy`` (whitened) with ``CholeskyVariationalDistribution``, a scaled Matérn-3/2
   kernel, ``VariationalELBO``, Adam, a fresh ``randperm`` minibatch per step. Where GPyTorch is not
   installed its rows say why (``gpytorch.skipped``). Steps: 100 (``--quick``: M = 30, 20 steps).
3. **airline**: the one-pass statistics with the dense method (exact GEMMs: jax-finufft is not on the
   GPU machine) and the L-BFGS fit of the 17 hyperparameters on the synthetic airline-size set
   (``models.airline.synthetic``: 3 952 942 training rows × 8, generated on the machine), then the test
   MSE (dense projections), against the CPU row of ``results/vff_scaling.json`` at the same N.
   ``--quick``: 10 000 rows, at most 20 L-BFGS iterations.
4. **float32**: float32 against float64 on the device for the collapsed bound, the SVGP ELBO (and the
   rest of ``float32.run_one``: predictions, the ``spectral_gp`` log density) at the README float32
   table's settings (N = 1000, σ² = 1e-2, seed 0), for each family at the table's hardest setting and
   largest M (``FLOAT32_ROWS``), beside the stored CPU errors; JAX's default matmul precision on a
   GPU may use TF32 for float32 products, so a row that does not hold is re-run under
   ``jax.default_matmul_precision("highest")`` (``highest``). ``--quick``: VFF at M = 8, N = 300.
5. **pines**: the README's main job (``models/pines.py``: 64 × 64 grid, VFF at the rule's box and M = 42,
   projected process, NUTS target 0.9 from ``INIT``, 4 chains × (500 warm-up + 2500 draws)), the 4
   chains vectorised on the one device, in float32 (``jax_enable_x64`` off for this run) and in float64:
   sampling time (wall minus compilation), min bulk ESS per sampling second (NumPyro's
   ``effective_sample_size``: no ArviZ needed), R-hat, and each hyperparameter's distance to the stored
   exact posterior (``results/pines.json``), |mean − exact mean| / exact sd; also ms per gradient of the
   potential (``harness.gradient_cost``) beside the stored CPU row. ``--quick``: 2 chains × (30 + 30),
   8 frequencies per axis (a smoke run: its distances are not the main job's).

The GPU run, its wheels and its time estimate: ``inference/benchmarks/GPU.md``.
"""
from __future__ import annotations

import json
import math
import os
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

from inference.benchmarks import harness

PARTS = ("hkd", "svgp", "airline", "float32", "pines")
# the UCI sets of hkd_uci.py: (training rows of split 0, test rows, inputs), for the synthetic stand-ins
UCI_SIZES = {"protein-tertiary-structure": (41157, 4573, 9), "kin8nm": (7373, 819, 8),
             "power-plant": (8611, 957, 4)}
HKD_METHODS = ("SVGP-m", "SVGP-2m", "HVGP 8xm", "HVGP 8xm shared")
# float32 rows on the device: per family, the README table's hardest setting and its largest M (and the
# M where the CPU run found float32's limit)
FLOAT32_ROWS = {"vff": ("nu=0.5 ell=10.0", [1024]), "kronecker-vff": ("nu=1.5 ell=0.2", [17]),
                "inducing-points": ("ell=1.0", [100, 300, 1000]), "hermite": ("ell=1.0", [160]),
                "trigonometric": ("ell=1.0", [161]), "harmonic-negation": ("ell=0.5", [300]),
                "harmonic-rotation": ("ell=5.0", [100]), "periodic-vff": ("ell=1.0", [80]),
                "random-fourier": ("ell=0.2", [1600]), "spherical-d3": ("chordal ell=0.3", [24]),
                "spherical-d5": ("chordal ell=1.0", [8])}
# the GPU run: sized to about 5 1/2 minutes on one H100 (GPU.md says how that was estimated); the time per
# step is the median over the steps after the first, so 300 (hkd) and 100 (svgp) steps give it, where the
# CPU benchmark's 3000 steps were for the test errors
FULL = {"hkd_datasets": tuple(UCI_SIZES), "hkd_methods": HKD_METHODS[:3], "hkd_m": 32, "hkd_steps": 300,
        "svgp_M": (1000, 4000), "svgp_steps": 100, "pines_chains": 4, "pines_warmup": 500, "pines_samples": 2500,
        "pines_num_frequencies": None, "airline_n": 3_952_942, "airline_maxiter": 500, "float32_n": 1000}
# --quick: every part at small sizes, a smoke run of the whole script on a CPU (pines: 8 frequencies per axis
# instead of the rule's 42, so its distances to the exact posterior are not the main job's)
QUICK = {"hkd_datasets": ("kin8nm",), "hkd_methods": HKD_METHODS[:3], "hkd_m": 8, "hkd_steps": 60,
         "svgp_M": (30,), "svgp_steps": 20, "pines_chains": 2, "pines_warmup": 30, "pines_samples": 30,
         "pines_num_frequencies": 8, "airline_n": 10_000, "airline_maxiter": 20, "float32_n": 300}
QUICK_FLOAT32 = {"vff": [8]}  # of float32.QUICK (a row costs ~10 s of compilation on a CPU)
BATCH, LR = 256, 0.01


def _stored(name):
    """A committed results JSON (``results/<name>.json``), or None."""
    path = harness.RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _x64(enabled: bool):
    """A context with float64 on or off (``jax.enable_x64``; ``jax.experimental``'s in older JAX)."""
    import jax

    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(enabled)
    from jax import experimental

    return experimental.enable_x64() if enabled else experimental.disable_x64()


# --- data ----------------------------------------------------------------------------------------------
def uci_data(dataset: str, data_dir=None, seed: int = 0):
    """``((X, y, X_test, y_test, scaler), source)``: split 0 of a UCI set as ``models.uci_hkd.load``
    gives it where the files are found, else a synthetic stand-in with the same training rows, test rows
    and inputs (``UCI_SIZES``): X ~ N(0, I), y a smooth function of X plus noise, scaled the same way."""
    import numpy as np

    from models import uci_hkd
    from ppl_sparsegp.datasets import standardise

    try:
        return uci_hkd.load(dataset, 0, data_dir), "UCI split 0"
    except (ValueError, OSError) as e:
        reason = f"{type(e).__name__}: {e}".splitlines()[0][:160]
    n, n_test, D = UCI_SIZES[dataset]
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + n_test, D))
    w = rng.normal(size=D) / math.sqrt(D)
    y = np.sin(2 * X @ w) + 0.5 * np.cos(X[:, 0]) + 0.3 * rng.normal(size=n + n_test)
    s = standardise(X[:n], y[:n], X[n:])
    return (s.X_train, s.y_train, s.X_test, y[n:], s.scaler), f"synthetic stand-in of the same size ({reason})"


# --- parts ---------------------------------------------------------------------------------------------
def hkd_part(sizes, args, progress=None):
    """Time per SVI step of each method of ``sizes["hkd_methods"]`` per data set, and the ratios to SVGP-m."""
    from inference.benchmarks import hkd_uci

    settings = SimpleNamespace(m=sizes["hkd_m"], steps=sizes["hkd_steps"], lr=LR, batch_size=BATCH)
    rows, sources = [], {}
    for ds in sizes["hkd_datasets"]:
        data, sources[ds] = uci_data(ds, args.data_dir)
        for r in hkd_uci.run(ds, 0, sizes["hkd_methods"], settings, data=data, timer=time.perf_counter):
            rows.append(r)
            print(f"  hkd {ds} {r['method']}: {r['ms_per_iter_wall']:.3f} ms/step (compile {r['compile_s']:.1f} s)",
                  flush=True)
    _, summary = hkd_uci.summarise(rows, sizes["hkd_methods"], key="ms_per_iter_wall")
    cpu = _stored("hkd_uci")
    for ds, methods in summary.items():
        for method, agg in methods.items():
            agg["cpu_time_ratio"] = (cpu["summary"].get(ds, {}).get(method, {}).get("time_ratio", [None])[0]
                                     if cpu else None)
    return {"settings": vars(settings), "data_source": sources, "rows": rows, "summary": summary,
            "targets": [t for t in (hkd_uci.targets(summary, m) for m in sizes["hkd_methods"][2:]) if t]}


def gpytorch_svgp(X, y, Z, lengthscale, *, steps: int, lr: float = LR, batch_size: int = BATCH, seed: int = 0):
    """GPyTorch's SVGP (whitened ``VariationalStrategy``, Cholesky q(u), scaled Matérn-3/2, Gaussian
    likelihood at noise 0.1, ``VariationalELBO``, Adam) in float64 on the GPU if there is one: the first
    step's seconds and the median ms per later step, each synchronised. ``{"skipped": why}`` without
    GPyTorch."""
    try:
        import gpytorch
        import torch
    except ImportError as e:
        return {"skipped": f"GPyTorch not installed here ({e})"}
    import numpy as np

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and hasattr(os, "sched_getaffinity"):
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(seed)
    dtype = torch.float64
    Xt, yt = (torch.as_tensor(np.asarray(a), dtype=dtype, device=device) for a in (X, y))

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            super().__init__(gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True))
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = SVGP(torch.tensor(np.array(Z), dtype=dtype)).to(device=device, dtype=dtype)
    model.covar_module.base_kernel.lengthscale = float(lengthscale)
    model.covar_module.outputscale = 1.0
    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(device=device, dtype=dtype)
    likelihood.noise = 0.1
    model.train(), likelihood.train()
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(X))
    optimiser = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=lr)

    def step():
        idx = torch.randperm(len(X), device=device)[:batch_size]
        optimiser.zero_grad(set_to_none=True)
        loss = -mll(model(Xt[idx]), yt[idx])
        loss.backward()
        optimiser.step()
        return loss.detach()

    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    times = []
    for _ in range(steps - 1):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    return {"first_step_s": first, "ms_per_iter_wall": 1e3 * float(np.median(times)),
            "ms_per_iter_q10_q90": [1e3 * float(q) for q in np.quantile(times, [0.1, 0.9])],
            "final_loss_per_datum": loss.item(), "device": str(device), "dtype": "float64"}


def svgp_part(sizes, args, progress=None):
    """The library's SVGP against GPyTorch's at each M: ms per step, compile/first step."""
    from inference.benchmarks import hkd_uci
    from models import uci_hkd

    (X, y, *_), source = uci_data("protein-tertiary-structure", args.data_dir)
    rows = []
    for M in sizes["svgp_M"]:
        with harness.clock() as km:
            gp = uci_hkd.make_gp(X, features="inducing", num_features=M, seed=0)
        _, timing, losses = hkd_uci.fit_timed(gp, X, y, steps=sizes["svgp_steps"], lr=LR, batch_size=BATCH)
        library = {**timing, "final_loss": losses[-1] if losses else None}
        theirs = gpytorch_svgp(X, y, gp.feature.Z.init, float(gp.kernel.lengthscale.init), steps=sizes["svgp_steps"])
        rows.append({"M": M, "kmeans_s": km.wall, "library": library, "gpytorch": theirs,
                     "gpytorch_over_library": (theirs["ms_per_iter_wall"] / library["ms_per_iter_wall"]
                                               if "ms_per_iter_wall" in theirs else None)})
        print(f"  svgp M={M}: library {library['ms_per_iter_wall']:.3f} ms/step "
              f"(compile {library['compile_s']:.1f} s), "
              f"GPyTorch {theirs.get('ms_per_iter_wall', float('nan')):.3f} ms/step", flush=True)
    return {"dataset": "protein-tertiary-structure", "data_source": source, "N": int(len(X)), "D": int(X.shape[1]),
            "steps": sizes["svgp_steps"], "batch_size": BATCH, "dtype": "float64", "rows": rows,
            "versions": _torch_versions()}


def _torch_versions():
    try:
        import gpytorch
        import torch
    except ImportError:
        return None
    return {"torch": torch.__version__, "gpytorch": gpytorch.__version__, "cuda": torch.cuda.is_available()}


def pines_part(sizes, args, progress=None):
    """The README's main job in float32 and float64, 4 chains vectorised on the one device;
    ``progress(result)`` is called with the result so far after each run."""
    import jax.numpy as jnp

    from inference.benchmarks import pines as bench
    from models import pines

    stored = _stored("pines")
    exact = stored["exact"]
    cpu = next((r for name, r in stored["rows"].items() if "main job" in name), None)
    feature = pines.default_feature(sizes["pines_num_frequencies"])
    rows = []
    result = {"model": f"models/pines.py: {feature.num_frequencies} frequencies per axis on [{feature.lower:.3f}, "
                       f"{feature.upper:.3f}], residual={pines.RESIDUAL}", "chain_method": "vectorized",
              "rows": rows, "cpu_reference": None if cpu is None else {
                  "row": "results/pines.json main job (2 chains x (500 + 500) one after another, one CPU core)",
                  "ms_per_gradient": cpu["ms_per_gradient"],
                  "min_bulk_ess_per_s_incl_compile": cpu["min_bulk_ess_per_s"]}}
    for dtype in ("float32", "float64"):
        with _x64(dtype == "float64"):
            spec = pines.build(SimpleNamespace(grid=pines.GRID, num_frequencies=sizes["pines_num_frequencies"]))
            data = (spec.X, spec.y)
            with harness.clock() as c:
                r = bench.run_nuts(spec.gp.model, data, chains=sizes["pines_chains"], warmup=sizes["pines_warmup"],
                                   samples=sizes["pines_samples"], chain_method="vectorized")
            r.update(dtype=dtype, data_dtype=str(jnp.asarray(spec.y).dtype), compile_s=c.compile,
                     sampling_s=c.wall - c.compile)
            r["min_bulk_ess_per_sampling_s"] = r["min_bulk_ess"] / r["sampling_s"]
            r["gradient_compile_s"], r["ms_per_gradient"] = harness.gradient_cost(spec.gp.model, data)
        r["distance"] = bench.distance(r, exact)
        r["max_distance"] = max(v["sd_distance"] for v in r["distance"].values())
        rows.append(r)
        if progress is not None:
            progress(result)
        print(f"  pines {dtype}: sampling {r['sampling_s']:.1f} s (compile {r['compile_s']:.1f} s), min bulk ESS/s "
              f"{r['min_bulk_ess_per_sampling_s']:.2f}, max distance {r['max_distance']:.2f} sd", flush=True)
    return result


def airline_part(sizes, args, progress=None):
    """Dense one-pass statistics and the L-BFGS fit on the synthetic airline set, against the CPU row."""
    import jax

    from models import airline
    from ppl_sparsegp.approximations.map_estimate import map_lbfgs
    from ppl_sparsegp.features.fourier_statistics import fourier_statistics

    n_train = sizes["airline_n"]
    cpu_json = _stored("vff_scaling") or {}
    num_frequencies = cpu_json.get("num_frequencies", 30)
    with harness.clock() as gen:
        X, y, names, f = airline.synthetic(int(round(n_train * 1.5)), seed=0)
        data = airline.prepare(X, y, seed=0)
        del X, y
    feature = airline.make_feature(len(names), num_frequencies)
    with harness.clock() as st:
        stats = jax.block_until_ready(fourier_statistics(feature, data["X"], data["y"], method="dense",
                                                         chunk_size=args.chunk_size))
    gp = airline.make_gp(feature, stats)
    with harness.clock() as opt:
        values, info = map_lbfgs(gp.model, gp.hyperparameter_sites(), num_steps=sizes["airline_maxiter"])
    with harness.clock() as pr:
        metrics = airline.test_metrics(gp, [values], data["X_test"], data["y_test"], method="dense",
                                       chunk_size=args.chunk_size)
    f_test = (f[data["test_index"]] - data["y_mean"]) / data["y_std"]
    row = {"n_train": int(len(data["y"])), "n_test": int(len(data["y_test"])), "num_features": feature.num_features,
           "generate_and_prepare_s": gen.wall, "chunk_size": args.chunk_size,
           "stats_dense_s": st.wall, "stats_dense_compile_s": st.compile, "stats_dense_run_s": st.wall - st.compile,
           "optimise_s": opt.wall, "optimise_compile_s": info["compile_s"], "lbfgs_iterations": info["iterations"],
           "lbfgs_evaluations": info["evaluations"],
           "ms_per_lbfgs_evaluation": 1e3 * (opt.wall - info["compile_s"]) / max(1, info["evaluations"] - 1),
           "noise_variance": float(values["likelihood_variance"]), "predict_s": pr.wall,
           "predict_compile_s": pr.compile,
           **metrics, "oracle_mse": float(((data["y_test"] - f_test) ** 2).mean())}
    row["fit_s"] = row["stats_dense_s"] + row["optimise_s"]
    cpu = next((r for r in cpu_json.get("rows", []) if r["n_train"] == row["n_train"]), None)
    if cpu is not None:
        row["cpu_reference"] = {k: cpu.get(k) for k in ("stats_dense_s", "stats_nufft_s", "optimise_s",
                                                        "optimise_compile_s", "lbfgs_iterations", "predict_s",
                                                        "whole_fit_s", "test_mse")}
        row["cpu_reference"]["machine"] = cpu_json.get("machine")
        row["speedup_stats_dense"] = cpu["stats_dense_s"] / row["stats_dense_s"] if cpu.get("stats_dense_s") else None
        row["speedup_optimise"] = cpu["optimise_s"] / row["optimise_s"]
    print(f"  airline N={row['n_train']:,}: dense statistics {st.wall:.2f} s (compile {st.compile:.1f} s), "
          f"L-BFGS {opt.wall:.2f} s ({info['iterations']} iterations), test MSE {row['test_mse']:.3f}", flush=True)
    return row


def float32_part(sizes, args, progress=None):
    """float32 against float64 on the device at the README float32 table's settings."""
    import jax

    from inference.benchmarks import float32 as f32

    if args.quick:
        sweep = {family: [(label, opts, [M for M in Ms if M in QUICK_FLOAT32[family]]) for label, opts, Ms in entries]
                 for family, entries in f32.QUICK.items() if family in QUICK_FLOAT32}
    else:
        sweep = {family: [(label, opts, Ms) for label, opts, _ in f32.FULL[family] if label == setting]
                 for family, (setting, Ms) in FLOAT32_ROWS.items()}
    settings = SimpleNamespace(n=sizes["float32_n"], noise=1e-2, seed=0)
    stored = _stored("float32") or {}
    cpu = ({(r["family"], r["setting"], r["M"]): r for r in stored.get("rows", [])}
           if stored.get("n") == settings.n and stored.get("noise") == settings.noise else {})
    keys = ("ok_collapsed", "ok_sparse", "ok_spectral", "bound_err", "elbo_err", "log_density_err", "refusal")
    rows = []
    for family, entries in sweep.items():
        for label, opts, Ms in entries:
            for M in Ms:
                row = f32.run_one(family, label, opts, M, settings)
                if not (row["ok_collapsed"] and row["ok_sparse"]):
                    with jax.default_matmul_precision("highest"):
                        row["highest"] = {k: v for k, v in f32.run_one(family, label, opts, M, settings).items()
                                          if k in keys}
                ref = cpu.get((family, label, M))
                row["cpu"] = None if ref is None else {k: ref.get(k) for k in keys}
                rows.append(row)
                if progress is not None:  # a stop at the command's limit keeps the rows done (gpu.json, partial)
                    progress({"n": settings.n, "noise": settings.noise, "seed": settings.seed, "rows": rows})
                print(f"  float32 {family} {label} M={M}: bound {row.get('bound_err', math.inf):.1e}, ELBO "
                      f"{row.get('elbo_err', math.inf):.1e}, holds {row['ok_collapsed']}/{row['ok_sparse']}",
                      flush=True)
    return {"n": settings.n, "noise": settings.noise, "seed": settings.seed,
            "matmul_precision": str(jax.config.jax_default_matmul_precision), "rows": rows}


RUNNERS = {"hkd": hkd_part, "svgp": svgp_part, "pines": pines_part, "airline": airline_part, "float32": float32_part}


# --- the headline figures ----------------------------------------------------------------------------------
def headline(parts: dict) -> dict:
    """The figures a table quotes, from the parts' results (a part missing or failed: absent)."""
    out = {}
    hkd = parts.get("hkd", {})
    if "summary" in hkd:
        ratios = {ds: {m: agg["time_ratio"][0] for m, agg in methods.items()} for ds, methods in hkd["summary"].items()}
        worst = max(r["HVGP 8xm"] for r in ratios.values()) if all("HVGP 8xm" in r for r in ratios.values()) else None
        out["hkd"] = {"time_ratio_vs_svgp_m": ratios, "max_hvgp_8xm_ratio": worst,
                      "hvgp_8xm_at_most_1_5": None if worst is None else bool(worst <= 1.5),
                      "ms_per_step": {ds: {m: agg["ms_per_iter_wall"][0] for m, agg in methods.items()}
                                      for ds, methods in hkd["summary"].items()}}
    svgp = parts.get("svgp", {})
    if "rows" in svgp:
        out["svgp"] = {str(r["M"]): {"library_ms": r["library"]["ms_per_iter_wall"],
                                     "gpytorch_ms": r["gpytorch"].get("ms_per_iter_wall"),
                                     "gpytorch_over_library": r["gpytorch_over_library"]} for r in svgp["rows"]}
    pines = parts.get("pines", {})
    if "rows" in pines:
        out["pines"] = {r["dtype"]: {"sampling_s": r["sampling_s"], "compile_s": r["compile_s"],
                                     "min_bulk_ess_per_s": r["min_bulk_ess_per_sampling_s"],
                                     "max_distance": r["max_distance"], "max_rhat": r["max_rhat"],
                                     "ms_per_gradient": r["ms_per_gradient"]} for r in pines["rows"]}
    air = parts.get("airline", {})
    if "stats_dense_s" in air:
        out["airline"] = {k: air.get(k) for k in ("n_train", "stats_dense_s", "optimise_s", "fit_s", "test_mse",
                                                  "speedup_stats_dense", "speedup_optimise")}
    f32 = parts.get("float32", {})
    if "rows" in f32:
        rows = f32["rows"]
        finite = [r for r in rows if r.get("finite32")]
        out["float32"] = {"rows": len(rows), "collapsed_holds": sum(r["ok_collapsed"] for r in rows),
                          "sparse_holds": sum(r["ok_sparse"] for r in rows),
                          "same_verdict_as_cpu": sum(r["cpu"] is not None
                                                     and r["ok_collapsed"] == r["cpu"]["ok_collapsed"]
                                                     and r["ok_sparse"] == r["cpu"]["ok_sparse"] for r in rows),
                          "with_cpu_row": sum(r["cpu"] is not None for r in rows),
                          "max_bound_err": max((r["bound_err"] for r in finite), default=None),
                          "max_elbo_err": max((r["elbo_err"] for r in finite), default=None)}
    return out


def out_paths(out, quick: bool):
    """``(store, summary)`` paths: ``--out`` is a folder (or, as for the other benchmarks, a ``.jsonl``
    store); default ``results/`` (``--quick``: the temporary folder)."""
    import tempfile

    if out is None:
        out = Path(tempfile.gettempdir()) / "ppl_sparsegp-benchmarks" if quick else harness.RESULTS
    out = Path(out)
    store = out if out.suffix == ".jsonl" else out / "gpu.jsonl"
    return store, store.with_suffix(".json")


def main(argv=None):
    # the GPU is shared with GPyTorch in the same process: JAX must not take 75% of its memory at start
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    p = harness.parser("gpu", __doc__)
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts (default: all, in this order)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder holding uci/ (default $PPL_SPARSEGP_DATA or ../shared/data; else stand-ins)")
    p.add_argument("--chunk-size", type=int, default=None, help="airline: rows per statistics step (library default)")
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    unknown = set(parts) - set(RUNNERS)
    if unknown:
        raise SystemExit(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    store_path, summary_path = out_paths(args.out, args.quick)
    args.out = store_path
    machine = harness.setup(args)
    import jax
    import numpyro

    sizes = QUICK if args.quick else FULL
    store = harness.Store(store_path, ["part"], settings={"quick": args.quick, **sizes}, resume=args.resume,
                          merge=args.merge)
    versions = {"jax": jax.__version__, "numpyro": numpyro.__version__, "backend": jax.default_backend(),
                "devices": [str(d) for d in jax.devices()], "torch": _torch_versions()}
    print(f"device {machine['device']} ({versions['backend']}), JAX {versions['jax']}, NumPyro {versions['numpyro']}",
          flush=True)
    t_start = time.perf_counter()
    for part in parts:
        if store.done(part) and "error" not in store.get(part):  # --resume/--merge: a failed part runs again
            continue
        print(f"\n## {part}", flush=True)
        t0, last = time.perf_counter(), {}

        def progress(partial, part=part, t0=t0, last=last):  # the summary with this part so far
            last.update(json.loads(json.dumps(partial, default=float)))
            _write(store, summary_path, machine, versions, args, sizes, time.perf_counter() - t_start,
                   {part: {"seconds": time.perf_counter() - t0, "partial": True, **last}})

        try:
            result = RUNNERS[part](sizes, args, progress)
        except Exception as e:  # one part's failure (e.g. out of memory) must not lose the others (nor this
            traceback.print_exc()  # part's finished runs; a rerun with --merge redoes the part)
            result = {**last, "error": f"{type(e).__name__}: {e}"[:2000]}
        store.add({"part": part, "seconds": time.perf_counter() - t0, **result})
        _write(store, summary_path, machine, versions, args, sizes, time.perf_counter() - t_start)
    return _write(store, summary_path, machine, versions, args, sizes, time.perf_counter() - t_start)


def _write(store, path, machine, versions, args, sizes, seconds, extra=None):
    parts = {r["part"]: {k: v for k, v in r.items() if k != "part"} for r in store.rows}
    parts.update(extra or {})
    result = {"benchmark": "gpu", "quick": args.quick, **machine, **versions, "sizes": sizes,
              "total_s": seconds, "part_seconds": {k: v.get("seconds") for k, v in parts.items()},
              "errors": {k: v["error"] for k, v in parts.items() if "error" in v},
              "headline": headline(parts), "parts": parts}
    path.parent.mkdir(parents=True, exist_ok=True)
    store.write_json(json.loads(json.dumps(result, default=float)), path)
    return result


if __name__ == "__main__":
    main()
