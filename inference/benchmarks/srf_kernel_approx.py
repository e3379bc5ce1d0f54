"""Kernel approximation by random features: Figure 2 of Warren et al. (2024).

Relative Frobenius error :math:`\\|K - \\hat K\\|_F / \\|K\\|_F` of the Gram matrix of the unit squared
exponential kernel :math:`\\exp(-\\|r\\|^2/2)` on N = 1000 inputs drawn uniformly in :math:`[0, 1]^d`,
for R frequencies (2R features) drawn by

* ``mc``: Monte Carlo from the spectral density N(0, I);
* ``qmc``: scrambled Halton points through the Gaussian quantile function;
* ``orf``: orthogonal random features;
* ``nystrom``: scikit-learn's ``Nystroem`` (γ = 1/2, R components, fitted on an independent uniform set,
  as in the authors' code);
* ``svgd``: Stein random features, R particles moved by plain SVGD towards N(0, I)
  (``ppl_sparsegp.approximations.spectrum.stein_frequencies``: SteinVI's step, vectorised; MC start, Adam 0.3, weight
  decay 1e-4, cyclical annealing c = 5, s = 0.5) with the notes' bandwidth, the per-dimension median
  (``bandwidth_scale=1``); ``--svgd-steps`` iterations, 15 000 in the authors' notebook;
* ``svgd_d``: the same with the bandwidth scaled by d (``bandwidth_scale=d``: h_k = d × the
  per-dimension median, about the median squared *distance*; ``stein_frequencies``' default). With the
  notes' per-dimension median the RBF particle kernel between typical particles is exp(−d·O(1)): at
  d ≥ 8 the repulsion vanishes and the particles collapse towards the mode (d = 8, R = 200: particle
  variance 0.31 instead of 1, error 0.53, worse than MC). The authors' d-sweep numbers (0.0055 at d = 8;
  the code that made them is not published) are reached with the wider kernel only; both are reported.

Two sweeps: R ∈ {10, 50, 100, 200, 1000} at d = 2, and d ∈ {2, 8, 16, 30} at R = 200; mean ± sd over
``--seeds`` seeds (5 in the authors' CSVs, 10 in the paper's caption). The authors' numbers (notes §2.1)
are stored next to ours. Time per approximation is reported as a ratio to Monte Carlo's.

``python -m inference.benchmarks.srf_kernel_approx [--quick] [--seeds 5] [--svgd-steps 2000] [--resume]``
prints Markdown tables and writes ``results/srf_kernel_approx.json`` (after every method, with
``"complete": false`` until the end; ``--resume`` continues an interrupted run).

References:
    1. Warren, Oliveira, Ramos (2024), Stein random feature regression, UAI, §5.1 and Figure 2.
    2. ``shared/notes/srf.md`` §1.4 and §2.1.
"""
from __future__ import annotations

import os

# one XLA thread per process: on a shared, oversubscribed CPU the spinning thread pools are slower
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

METHODS = ("mc", "qmc", "orf", "nystrom", "svgd", "svgd_d")
R_SWEEP = (10, 50, 100, 200, 1000)
D_SWEEP = (2, 8, 16, 30)
N = 1000
RESULTS = Path(__file__).resolve().parent / "results" / "srf_kernel_approx.json"

#: the authors' CSVs (5 seeds, mean relative error; notes §2.1); "svgd" is their plotted "msrf" column
PAPER_CODE = {
    "R": {10: dict(mc=.0557, qmc=.0265, orf=.0940, nystrom=.0005, svgd=.0056),
          50: dict(mc=.0361, qmc=.0084, orf=.0285, nystrom=.0001, svgd=.0008),
          100: dict(mc=.0196, qmc=.0039, orf=.0239, nystrom=.0001, svgd=.0003),
          200: dict(mc=.0138, qmc=.0018, orf=.0076, nystrom=.0001, svgd=.0001),
          1000: dict(mc=.0054, qmc=.0005, orf=.0060, nystrom=.0001, svgd=.0000)},
    "d": {2: dict(mc=.0138, qmc=.0018, orf=.0092, nystrom=.0001, svgd=.0001),
          8: dict(mc=.0658, qmc=.0292, orf=.0334, nystrom=.0016, svgd=.0055),
          16: dict(mc=.1507, qmc=.1185, orf=.0977, nystrom=.0442, svgd=.0719),
          30: dict(mc=.4470, qmc=.4344, orf=.3992, nystrom=.2630, svgd=.4096)},
}


def relative_error(method, R, d, seed, svgd_steps):
    """(‖K − K̂‖_F / ‖K‖_F, seconds to build the features) for one configuration."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp import SquaredExponential
    from ppl_sparsegp.features.random_fourier import RandomFourierFeatures, sample_frequencies
    from ppl_sparsegp.approximations.spectrum import stein_frequencies

    kernel = SquaredExponential(1.0, 1.0)
    k_x, k_fit, k_w = jax.random.split(jax.random.PRNGKey(seed), 3)
    X = jax.random.uniform(k_x, (N, d))
    K = kernel(X)
    t0 = time.perf_counter()
    if method == "nystrom":
        from sklearn.kernel_approximation import Nystroem

        fit_set = np.asarray(jax.random.uniform(k_fit, (N, d)))
        ny = Nystroem(kernel="rbf", gamma=0.5, n_components=R, random_state=seed).fit(fit_set)
        F = jnp.asarray(ny.transform(np.asarray(X)))
        Kh = F @ F.T
    else:
        if method in ("svgd", "svgd_d"):
            W = stein_frequencies(kernel, k_w, R, d, num_steps=svgd_steps,
                                  bandwidth_scale=float(d) if method == "svgd_d" else 1.0)  # explicit: the default is d
        else:
            W = sample_frequencies(kernel, k_w, R, d, method)
        Kh = RandomFourierFeatures(W).gram(kernel, X)
    Kh = jax.block_until_ready(Kh)
    seconds = time.perf_counter() - t0
    return float(jnp.linalg.norm(K - Kh) / jnp.linalg.norm(K)), seconds


def sweep(configs, methods, seeds, svgd_steps, log, done=None, save=None):
    """Rows ``{key: {method: stats}}``; ``done`` holds rows already computed (kept, not recomputed) and
    ``save(out)`` is called after every method, so an interrupted run can be resumed."""
    import numpy as np

    out = {k: dict(v) for k, v in (done or {}).items()}
    for key, R, d in configs:
        row = out.setdefault(key, {})
        for method in methods:
            if method in row:
                continue
            errs, secs = zip(*(relative_error(method, R, d, s, svgd_steps) for s in range(seeds)))
            row[method] = {"mean": float(np.mean(errs)), "sd": float(np.std(errs, ddof=1)) if seeds > 1 else 0.0,
                           "seconds": float(np.mean(secs)), "errors": list(map(float, errs))}
            log(f"R={R:5d} d={d:3d} {method:8s} {row[method]['mean']:.5f} ± {row[method]['sd']:.5f} "
                f"({row[method]['seconds']:.2f} s)")
            if save is not None:
                save(out)
    return out


def markdown(result, sweep_name, label):
    methods = result["methods"]
    head = f"| {label} | " + " | ".join(methods) + " | " + " | ".join(f"{m} (code)" for m in methods) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(methods))]
    for key, row in result[sweep_name].items():
        ref = PAPER_CODE[sweep_name].get(int(key), {})
        ours = " | ".join(f"{row[m]['mean']:.4f} ± {row[m]['sd']:.4f}" if m in row else "—" for m in methods)
        theirs = " | ".join(f"{ref[m]:.4f}" if m in ref else "" for m in methods)
        lines.append(f"| {key} | {ours} | {theirs} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 seeds, R ≤ 200, d ≤ 8, 300 SVGD steps")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--svgd-steps", type=int, default=2000)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--resume", action="store_true",
                   help="keep the rows of --out computed with the same seeds and SVGD steps")
    args = p.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    r_sweep, d_sweep = R_SWEEP, D_SWEEP
    if args.quick:
        args.seeds, args.svgd_steps, r_sweep, d_sweep = 2, 300, (10, 50, 200), (2, 8)
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {METHODS}")
    result = {"benchmark": "srf_kernel_approx", "quick": args.quick, "N": N, "seeds": args.seeds,
              "svgd_steps": args.svgd_steps, "methods": methods, "paper_code": PAPER_CODE,
              "device": jax.devices()[0].device_kind}
    old = {}
    if args.resume and args.out.exists():
        prev = json.loads(args.out.read_text())
        if prev.get("seeds") == args.seeds and prev.get("svgd_steps") == args.svgd_steps:
            old = {name: {int(k): v for k, v in prev.get(name, {}).items()} for name in ("R", "d")}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(name):
        def write(rows):
            args.out.write_text(json.dumps({**result, name: rows, "complete": False}, indent=1) + "\n")
        return write

    result["R"] = sweep([(R, R, 2) for R in r_sweep], methods, args.seeds, args.svgd_steps, print,
                        old.get("R"), save("R"))
    result["d"] = sweep([(d, 200, d) for d in d_sweep], methods, args.seeds, args.svgd_steps, print,
                        old.get("d"), save("d"))
    result["complete"] = True
    mc_time = result["R"][200]["mc"]["seconds"] if "mc" in methods else None
    if mc_time:
        result["time_ratio_vs_mc_at_R200_d2"] = {m: result["R"][200][m]["seconds"] / mc_time for m in methods}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("\nRelative Frobenius error, d = 2 (ours: mean ± sd over seeds; code: the authors' CSVs)\n")
    print(markdown(result, "R", "R"))
    print("\nRelative Frobenius error, R = 200\n")
    print(markdown(result, "d", "d"))
    if mc_time:
        print("\ntime to build the features relative to MC (R = 200, d = 2; SVGD includes compilation): "
              + ", ".join(f"{m} {v:.1f}×" for m, v in result["time_ratio_vs_mc_at_R200_d2"].items()))
    return result


if __name__ == "__main__":
    main()
