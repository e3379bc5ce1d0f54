"""Flip-digits: HVGP with the flip group (4 × m) versus SVGP with M = m and 4m, and a mismatched group.

The paper's Flip-MNIST (Sun, Shi, Wilson & Grosse 2021, §4.2, Fig. 2) at CPU scale: scikit-learn's 8×8
digits, each flipped up–down and/or left–right at random (``models/digits_flip.py``), 1200 training and
597 test images, 10 classes, 10 latent GPs with one isotropic squared-exponential kernel, a softmax
likelihood (Monte Carlo expected log-likelihood; ``--likelihood robustmax`` for the paper's CIFAR
likelihood) and Adam with minibatches. Methods:

* ``SVGP-m``, ``SVGP-4m``: inducing images, full-rank q(u) per class;
* ``FLIP 4xm``: harmonic features of the up–down × left–right flip group (matches the data), 4 × m;
* ``NEG 4xm``: harmonic features of the 2-way negation of the even / odd pixels (does not match the
  data), the paper's control.

The paper's finding: FLIP 4×100 ≈ SVGP-400 and NEG 4×100 is substantially worse. Reported: test accuracy,
test NLL (mean negative log predictive probability), compile time, and time per iteration with its ratio
to SVGP-m, timed as in ``hkd_uci`` (the methods of one seed fitted together in interleaved blocks, every
step timed on its own, median of the process CPU time; the process pinned to one core by default).

``python -m inference.benchmarks.hkd_digits [--quick] [--seeds 0,1] [--m 16] [--steps 2000]``;
prints a Markdown table and writes ``results/hkd_digits.json``.
"""
from __future__ import annotations

from inference.benchmarks import harness
from inference.benchmarks.harness import fit_interleaved
from inference.benchmarks.hkd_uci import chosen_methods, training_parser

METHODS = ("SVGP-m", "SVGP-4m", "FLIP 4xm", "NEG 4xm")


def method_config(method: str, m: int) -> dict:
    return {"SVGP-m": dict(features="inducing", num_features=m),
            "SVGP-4m": dict(features="inducing", num_features=4 * m),
            "FLIP 4xm": dict(features="flip", num_features=m),
            "NEG 4xm": dict(features="neg", num_features=m)}[method]


def run(seed, methods, args):
    """Fit every method for one seed (interleaved timing); one result row per method."""
    from models import digits_flip

    X, y, X_test, y_test = digits_flip.load(seed=seed)
    gps = {method: digits_flip.make_gp(X, likelihood=args.likelihood, seed=seed, **method_config(method, args.m))
           for method in methods}
    fits = fit_interleaved(gps, X, y, steps=args.steps, lr=args.lr, batch_size=args.batch_size, seed=seed)
    rows = []
    for method, gp in gps.items():
        params, timing, losses = fits[method]
        rows.append({"seed": seed, "method": method, "num_inducing_total": gp.feature.num_features,
                     **digits_flip.metrics(gp, params, X_test, y_test), **timing,
                     "final_loss": losses[-1] if losses else None})
    return rows


def main(argv=None):
    p = training_parser("hkd_digits", __doc__, METHODS, m=16, steps=2000)
    p.add_argument("--seeds", default="0", help="comma-separated seeds of flips, split and initialisation")
    p.add_argument("--likelihood", choices=("softmax", "robustmax"), default="softmax")
    args = p.parse_args(argv)
    if args.quick:
        args.m, args.steps = 4, 200
    methods = chosen_methods(args, METHODS)
    machine = harness.setup(args, one_thread=True)
    import numpy as np

    seeds = [int(s) for s in args.seeds.split(",") if s]
    store = harness.Store(args.out, ["seed", "method"], resume=args.resume, merge=args.merge,
                          settings={k: getattr(args, k) for k in ("m", "steps", "lr", "batch_size", "likelihood")})
    for seed in seeds:
        todo = [m for m in methods if not store.done(seed, m)]
        if not todo:
            continue
        for r in run(seed, todo, args):
            store.add(r)
            print(f"  seed {seed} {r['method']}: accuracy {r['accuracy']:.4f} NLL {r['nll']:.4f} "
                  f"{r['ms_per_iter_cpu']:.2f} ms/iter (wall {r['ms_per_iter_wall']:.2f}; compile "
                  f"{r['compile_s']:.1f} s)", flush=True)

    rows = store.rows
    ref = {r["seed"]: r["ms_per_iter_cpu"] for r in rows if r["method"] == "SVGP-m"}
    summary = {}
    for method in methods:
        rs = [r for r in rows if r["method"] == method]
        agg = {k: (float(np.mean([r[k] for r in rs])), float(np.std([r[k] for r in rs])))
               for k in ("accuracy", "nll", "ms_per_iter_cpu", "compile_s")}
        ratios = [r["ms_per_iter_cpu"] / ref[r["seed"]] for r in rs if r["seed"] in ref]
        agg["time_ratio"] = (float(np.mean(ratios)), float(np.std(ratios))) if ratios else (float("nan"), 0.0)
        agg["num_inducing_total"] = rs[0]["num_inducing_total"]
        summary[method] = agg
    core = machine["pinned_core"]
    print(f"\n### Flip-digits, 10 classes ({args.likelihood}; m = {args.m}, {args.steps} steps, "
          f"batch {args.batch_size}, seeds {seeds}; {'core ' + str(core) if core is not None else 'all cores'})\n")
    fmt2 = harness.pm(2)
    print(harness.table([{"method": k, **v} for k, v in summary.items()], [
        ("method", "method", ""), ("M total", "num_inducing_total", "d"), ("test accuracy", "accuracy", harness.pm(4)),
        ("test NLL", "nll", harness.pm(3)), ("ms / iter (CPU)", "ms_per_iter_cpu", fmt2),
        ("× SVGP-m", "time_ratio", fmt2), ("compile (s)", "compile_s", harness.pm(1))]))
    config = {k: (str(v) if k == "out" else v) for k, v in vars(args).items() if k != "merge"}
    store.write_json({"benchmark": "hkd_digits", "config": config, **machine, "runs": rows, "summary": summary})


if __name__ == "__main__":
    main()
