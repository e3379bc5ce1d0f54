"""HVGP (harmonic features over 3-way principal-axis negations, 8 × m) versus SVGP with M = m and 2m.

The regression experiment of Sun, Shi, Wilson & Grosse (2021, §6.3, Fig. 5) at CPU scale: protein,
kin8nm and power-plant with their fixed splits, inputs and targets standardised, a Matérn-3/2 kernel with
one shared lengthscale, a Gaussian likelihood, inducing inputs initialised by k-means and optimised,
hyperparameters point-estimated, Adam, minibatches of 256 and the same number of steps for every method.
Methods (``models/uci_hkd.py``):

* ``SVGP-m``, ``SVGP-2m``: inducing points, full-rank q(u);
* ``HVGP 8xm``: 8 sub-kernels × m inducing inputs each (the paper's model), block-diagonal q(u);
* ``HVGP 8xm shared``: the same with one set of m inducing inputs shared by the 8 sub-kernels (Thm 4.1:
  an SVGP on the 8m orbit points, with block-diagonal q) — 8× fewer kernel evaluations.

Reported: test RMSE and NLPD in original units, the compile time (initialisation and first step) and the
time per SVI iteration: every step timed on its own (process CPU time, and wall-clock), the median over
all steps after the first; the methods of one data set and split are fitted together, in interleaved
blocks of steps, so a load change on a shared machine hits them alike. By default the process is pinned to
one core and XLA's Eigen thread pool is off (``--cpu``), which makes CPU and wall time agree and the
medians stable. Also reported: the cost of NumPyro's minibatch subsampling of N indices (a Fisher–Yates
loop of B steps on CPU, the same in every method's step) and the time ratio without it. The paper's
claim, checked at the end: 8×m beats SVGP-m on NLPD on every data set and SVGP-2m on at least two, at a
time per iteration at most 1.5× SVGP-m's.

``python -m inference.benchmarks.hkd_uci [--quick] [--splits 0,1] [--m 32] [--steps 3000]``;
prints a Markdown table and writes ``results/hkd_uci.json``.
"""
from __future__ import annotations

import time

from inference.benchmarks import harness

DATASETS = ("protein-tertiary-structure", "kin8nm", "power-plant")
SHORT = {"protein-tertiary-structure": "protein", "kin8nm": "kin8nm", "power-plant": "power"}
METHODS = ("SVGP-m", "SVGP-2m", "HVGP 8xm", "HVGP 8xm shared")


def training_parser(name, doc, methods, *, m: int, steps: int):
    """The harness parser with the flags the HKD benchmarks share: methods, m, steps, lr, batch size; the
    process is pinned to one core by default (``--cpu last``)."""
    p = harness.parser(name, doc, cpu="last")
    p.add_argument("--methods", default=",".join(methods))
    p.add_argument("--m", type=int, default=m, help="inducing points per sub-kernel / SVGP-m's M")
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=256)
    return p


def chosen_methods(args, methods):
    """``--methods`` checked against ``methods``."""
    chosen = [m for m in args.methods.split(",") if m]
    unknown = set(chosen) - set(methods)
    if unknown:
        raise SystemExit(f"unknown methods {sorted(unknown)}; choose from {methods}")
    return chosen


def fit_timed(gp, X, y, *, steps: int, lr: float, batch_size: int, seed: int = 0, block: int = 50):
    """:func:`~inference.benchmarks.harness.fit_interleaved` of one model: ``(params, timing, losses)``."""
    return harness.fit_interleaved({"model": gp}, X, y, steps=steps, lr=lr, batch_size=batch_size, seed=seed,
                           block=block)["model"]


def subsample_ms(N: int, batch_size: int, seed: int = 0, repeats: int = 300, timer=time.process_time) -> float:
    """Median time (ms; ``timer``: process CPU time by default, ``time.perf_counter`` for wall-clock time,
    the measure on a GPU) of NumPyro's minibatch index draw (``plate(..., subsample_size)``), jitted alone:
    the part of every method's SVI step that does not depend on the model."""
    import jax
    import numpy as np

    from ppl_sparsegp.numpyro_internals import subsample_indices

    draw = jax.jit(lambda key: subsample_indices(N, batch_size, key))
    jax.block_until_ready(draw(jax.random.PRNGKey(seed)))
    times = []
    for i in range(repeats):
        key = jax.random.PRNGKey(seed + i + 1)
        c = timer()
        jax.block_until_ready(draw(key))
        times.append(timer() - c)
    return 1e3 * float(np.median(times))


def method_config(method: str, m: int) -> dict:
    return {"SVGP-m": dict(features="inducing", num_features=m),
            "SVGP-2m": dict(features="inducing", num_features=2 * m),
            "HVGP 8xm": dict(features="harmonic", num_features=m, ways=3),
            "HVGP 8xm shared": dict(features="harmonic", num_features=m, ways=3, shared_z=True)}[method]


def run(dataset, split, methods, args, data=None, timer=time.process_time):
    """Fit every method on one data set and split (interleaved timing); one result row per method.
    ``data``: ``(X, y, X_test, y_test, scaler)`` as :func:`models.uci_hkd.load` returns (default: that
    split); ``timer``: of the subsampling cost (:func:`subsample_ms`)."""
    import numpy as np

    from models import uci_hkd

    X, y, X_test, y_test, scaler = uci_hkd.load(dataset, split) if data is None else data
    gps = {method: uci_hkd.make_gp(X, seed=split, **method_config(method, args.m)) for method in methods}
    fits = harness.fit_interleaved(gps, X, y, steps=args.steps, lr=args.lr, batch_size=args.batch_size, seed=split)
    sub = subsample_ms(len(X), args.batch_size, seed=split, timer=timer)
    rows = []
    for method, gp in gps.items():
        params, timing, losses = fits[method]
        rows.append({"dataset": dataset, "split": split, "method": method, "N": int(len(X)), "D": int(X.shape[1]),
                     "num_inducing_total": gp.feature.num_features,
                     **uci_hkd.metrics(gp, params, X_test, y_test, scaler), **timing, "subsample_ms": sub,
                     "final_loss": losses[-1] if losses else None,
                     "lengthscale": float(np.asarray(params["kernel_lengthscale"])),
                     "noise_variance": float(np.asarray(params["likelihood_variance"]))})
    return rows


def summarise(rows, methods, key="ms_per_iter_cpu"):
    """Per data set and method: means ± sd over splits and the time ratios to SVGP-m, of the time per
    iteration ``key`` (``"ms_per_iter_wall"`` on a GPU, where process CPU time is not the cost)."""
    import numpy as np

    table, summary = [], {}
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        ref = {r["split"]: r[key] for r in rows if r["dataset"] == ds and r["method"] == "SVGP-m"}
        sub = {r["split"]: r["subsample_ms"] for r in rows if r["dataset"] == ds and "subsample_ms" in r}
        for method in methods:
            rs = [r for r in rows if r["dataset"] == ds and r["method"] == method]
            if not rs:
                continue
            agg = {k: (float(np.mean([r[k] for r in rs])), float(np.std([r[k] for r in rs])))
                   for k in dict.fromkeys(("rmse", "nlpd", "ms_per_iter_cpu", key))}
            ratios = [r[key] / ref[r["split"]] for r in rs if r["split"] in ref]
            agg["time_ratio"] = (float(np.mean(ratios)), float(np.std(ratios))) if ratios else (float("nan"), 0.0)
            net = [(r[key] - sub[r["split"]]) / (ref[r["split"]] - sub[r["split"]]) for r in rs
                   if r["split"] in ref and r["split"] in sub]
            agg["time_ratio_without_subsampling"] = ((float(np.mean(net)), float(np.std(net))) if net
                                                     else (float("nan"), 0.0))
            agg["compile_s"] = (float(np.mean([r["compile_s"] for r in rs])),
                                float(np.std([r["compile_s"] for r in rs])))
            agg["subsample_ms"] = float(np.mean([sub[r["split"]] for r in rs if r["split"] in sub])) if sub else None
            agg["splits"] = len(rs)
            summary.setdefault(ds, {})[method] = agg
            table.append((SHORT.get(ds, ds), method, rs[0]["num_inducing_total"], agg))
    return table, summary


def targets(summary, hvgp="HVGP 8xm"):
    """The paper's claim for one HVGP row: beats SVGP-m's NLPD everywhere, SVGP-2m's on ≥ 2 data sets,
    time per iteration ≤ 1.5× SVGP-m's."""
    sets = [ds for ds in summary if {hvgp, "SVGP-m", "SVGP-2m"} <= set(summary[ds])]
    if not sets:
        return None
    nlpd = {ds: {k: v["nlpd"][0] for k, v in summary[ds].items()} for ds in sets}
    beats_m = all(nlpd[ds][hvgp] < nlpd[ds]["SVGP-m"] for ds in sets)
    beats_2m = sum(nlpd[ds][hvgp] < nlpd[ds]["SVGP-2m"] for ds in sets)
    ratio = max(summary[ds][hvgp]["time_ratio"][0] for ds in sets)
    return {"method": hvgp, "datasets": sets, "beats_svgp_m_nlpd_everywhere": bool(beats_m),
            "beats_svgp_2m_nlpd_count": int(beats_2m),
            "beats_svgp_2m_on_at_least_two": bool(beats_2m >= min(2, len(sets))),
            "max_time_ratio_vs_svgp_m": ratio, "time_ratio_at_most_1_5": bool(ratio <= 1.5)}


def main(argv=None):
    p = training_parser("hkd_uci", __doc__, METHODS, m=32, steps=3000)
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--splits", default="0", help="comma-separated split indices (default 0)")
    args = p.parse_args(argv)
    if args.quick:
        args.m, args.steps = 8, 300
    methods = chosen_methods(args, METHODS)
    machine = harness.setup(args, one_thread=True)

    datasets = [d for d in args.datasets.split(",") if d]
    splits = [int(s) for s in args.splits.split(",") if s]
    store = harness.Store(args.out, ["dataset", "split", "method"], resume=args.resume, merge=args.merge,
                          settings={k: getattr(args, k) for k in ("m", "steps", "lr", "batch_size")})
    for ds in datasets:
        for split in splits:
            todo = [m for m in methods if not store.done(ds, split, m)]
            if not todo:
                continue
            for r in run(ds, split, todo, args):
                store.add(r)
                print(f"  {SHORT.get(ds, ds)} split {split} {r['method']}: RMSE {r['rmse']:.4f} NLPD {r['nlpd']:.4f} "
                      f"{r['ms_per_iter_cpu']:.2f} ms/iter (wall {r['ms_per_iter_wall']:.2f}; compile "
                      f"{r['compile_s']:.1f} s; subsampling {r['subsample_ms']:.2f} ms)", flush=True)

    rows = store.rows
    table, summary = summarise(rows, methods)
    core = machine["pinned_core"]
    print(f"\n### HVGP vs SVGP on UCI (m = {args.m}, {args.steps} steps, batch {args.batch_size}, "
          f"splits {splits}; {'core ' + str(core) if core is not None else 'all cores'})\n")
    fmt2 = harness.pm(2)
    print(harness.table([dict(zip(("dataset", "method", "M"), t[:3]), **t[3]) for t in table], [
        ("data set", "dataset", ""), ("method", "method", ""), ("M total", "M", "d"),
        ("test RMSE", "rmse", harness.pm(4)), ("test NLPD", "nlpd", harness.pm(3)),
        ("ms / iter (CPU)", "ms_per_iter_cpu", fmt2), ("× SVGP-m", "time_ratio", fmt2),
        ("× SVGP-m without subsampling", "time_ratio_without_subsampling", fmt2),
        ("compile (s)", "compile_s", harness.pm(1))]))
    checks = [t for t in (targets(summary, "HVGP 8xm"), targets(summary, "HVGP 8xm shared")) if t]
    for t in checks:
        print(f"\n{t['method']}: beats SVGP-m on NLPD on every data set: {t['beats_svgp_m_nlpd_everywhere']}; "
              f"beats SVGP-2m on {t['beats_svgp_2m_nlpd_count']}/{len(t['datasets'])}; "
              f"time per iteration ≤ 1.5× SVGP-m: {t['time_ratio_at_most_1_5']} "
              f"(max ratio {t['max_time_ratio_vs_svgp_m']:.2f})")
    config = {k: (str(v) if k == "out" else v) for k, v in vars(args).items() if k != "merge"}
    store.write_json({"benchmark": "hkd_uci", "config": config, **machine, "runs": rows, "summary": summary,
                      "targets": checks})


if __name__ == "__main__":
    main()
