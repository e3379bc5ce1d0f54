"""The command-line runner: ``python -m inference list`` and ``python -m inference fit <model> ...``.

``fit`` builds the model's :class:`~models.ModelSpec`, runs SVI (natural gradients for q(u) with Adam,
or Adam), NUTS or the model's Stein routine (the library's loops :func:`~ppl_sparsegp.engines.fit_svi`
and :func:`~ppl_sparsegp.engines.fit_nuts`, which the benchmarks use too), and writes into ``--out``
(default ``runs/<model>-<method>/``):

* ``idata.nc``: the ArviZ InferenceData (netCDF; for SVI/MAP the pointwise groups hold at most
  :data:`~ppl_sparsegp.diagnostics.MAX_POINTWISE` values per variable, see
  :func:`~ppl_sparsegp.diagnostics.from_svi`);
* ``fit.npz`` (``--method svi`` and ``map``): the fitted approximation, which predicts without the
  runner (:mod:`ppl_sparsegp.saving`; metadata: model, method, seed, steps, learning rate, final loss);
* ``summary.txt``: ArviZ summary (mean, sd, HDI, ESS, R-hat) of the hyperparameters;
* ``metrics.json``: the model's test metrics, the fit time and engine statistics;
* PNG plots: the model's own plot (``fit.png``), the trace plot (NUTS) or the loss trace (SVI).

Settings resolve as: command-line flag, else ``spec.defaults[method]``, else :data:`DEFAULTS`.

SVI runs in compiled blocks of steps (:func:`~ppl_sparsegp.engines.fit_svi`): memory does not grow
with the steps, a step whose loss or params are not finite stops the run with a one-line error naming
the step and the params, and a loss that diverges (grows by orders of magnitude, or ends far worse than
it started) stops it with a one-line error naming the step size to lower (``--lr`` or ``--gamma``).

Reload an SVI or MAP fit and predict, in any later Python session (inputs and targets on the scale the
model was fitted on: models that standardise their data, e.g. ``uci_*``, predict standardised values)::

    import jax
    jax.config.update("jax_enable_x64", True)  # the runner fits in float64
    from ppl_sparsegp.saving import load_fit, load_metadata

    gp, params = load_fit("runs/solar-svi/fit.npz")
    pred = gp.predict(X_new, params=params)  # {"f_mean", "f_var", "y_mean", "y_var"}
    load_metadata("runs/solar-svi/fit.npz")["metadata"]  # model, method, seed, steps, lr, final_loss, ...
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from inference.cli import OneLineParser, count, non_negative_int, open_unit, out_folder, positive_number, step_size
from ppl_sparsegp.engines import NonFiniteLossError, SVIDivergenceError, fit_nuts, fit_svi

METHODS = ("svi", "nuts", "stein", "map")
# fallbacks when neither the command line nor spec.defaults[method] sets a value
DEFAULTS = {
    "svi": {"num_steps": 5000, "lr": 0.01, "samples": 1000},
    "nuts": {"warmup": 500, "samples": 500, "chains": 2, "target_accept": 0.9, "max_tree_depth": 10,
             "dense_mass": False},
    "stein": {"num_steps": 2000, "lr": 0.01, "samples": 1000},
    "map": {"num_steps": 500, "samples": 100},  # num_steps: the most L-BFGS iterations
}
SETTINGS = ("num_steps", "lr", "warmup", "samples", "chains", "target_accept", "max_tree_depth", "dense_mass")


def _parser(model_name=None, model_module=None):
    p = OneLineParser(prog="python -m inference",
                                description="Fit the models of models/ with SVI, NUTS or SteinVI.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the available models")
    f = sub.add_parser("fit", help="fit a model and write idata.nc, summary.txt, metrics.json, plots",
                       description="Fit a model. Unset settings come from the model's defaults.")
    f.add_argument("model", help="model name (see `python -m inference list`)")
    f.add_argument("--method", choices=METHODS, default=None,
                   help="inference method (default: the model's first method)")
    f.add_argument("--num-steps", type=count, help="SVI/Stein optimisation steps (map: the most L-BFGS iterations)")
    f.add_argument("--lr", type=positive_number, help="Adam learning rate (SVI/Stein)")
    f.add_argument("--optimizer", choices=("natgrad", "adam"), default="natgrad",
                   help="SVI: natural-gradient steps for q(u) alternating with Adam on the rest (default; "
                        "models without a full, diagonal or equal-block q(u) fall back to Adam), or Adam on all")
    f.add_argument("--gamma", type=step_size, default=None,
                   help="SVI natural-gradient step size, taken as given (default: 1 for a Gaussian likelihood "
                        "on the full batch, else a ramp from 1e-4 to 0.1 over 5 steps, both halved in a step "
                        "until its loss does not rise); refused with --optimizer adam or a q without a "
                        "natural-gradient step")
    f.add_argument("--warmup", type=non_negative_int, help="NUTS warm-up iterations per chain")
    f.add_argument("--samples", type=count,
                   help="NUTS draws per chain, or SVI/Stein draws from the fitted posterior")
    f.add_argument("--chains", type=count, help="NUTS chains (parallel when devices allow)")
    f.add_argument("--target-accept", dest="target_accept", type=open_unit, help="NUTS target acceptance")
    f.add_argument("--max-tree-depth", dest="max_tree_depth", type=count, help="NUTS maximum tree depth")
    f.add_argument("--dense-mass", dest="dense_mass", action=argparse.BooleanOptionalAction, default=None,
                   help="NUTS: adapt a dense (or, with --no-dense-mass, diagonal) mass matrix")
    f.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    f.add_argument("--out", type=out_folder, default=None, help="output folder (default runs/<model>-<method>/)")
    f.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    f.add_argument("--refine", action="store_true",
                   help="after a NUTS fit, also run the refinement check (the model with every feature refined: "
                        "importance weights where nothing is latent, a short NUTS refit; prints its verdict)")
    if model_module is not None and hasattr(model_module, "add_arguments"):
        model_module.add_arguments(f.add_argument_group(f"options of model {model_name!r}"))
    return p


def _planned_chains(args, module) -> int:
    """The NUTS chains a fit will run, known before the model is built (so before JAX starts): the
    flag, else the model module's ``DEFAULTS["nuts"]["chains"]``, else the runner's."""
    if args.chains is not None:
        return args.chains
    declared = getattr(module, "DEFAULTS", {}).get("nuts", {})
    return declared.get("chains", DEFAULTS["nuts"]["chains"])


def _configure_jax(chains):
    """float64 and one host device per chain, so that every chain runs in parallel (on 2 cores, 4
    parallel chains were measured 1.3x faster than 4 chains one after another); before any JAX
    computation."""
    import jax

    from ppl_sparsegp.numpyro_internals import set_host_device_count

    set_host_device_count(chains)
    jax.config.update("jax_enable_x64", True)


def _resolve(args, spec):
    """Fill unset settings from spec.defaults[method], then DEFAULTS; validate them."""
    given = spec.defaults.get(args.method, {})
    for name in SETTINGS:
        if getattr(args, name) is None:
            setattr(args, name, given.get(name, DEFAULTS[args.method].get(name)))
    for name in ("num_steps", "warmup", "samples", "chains", "max_tree_depth"):
        value, least = getattr(args, name), 0 if name == "warmup" else 1
        if value is not None and value < least:
            kind = "non-negative" if least == 0 else "positive"
            raise ValueError(f"--{name.replace('_', '-')} must be {kind}, got {value}")
    if args.lr is not None and not args.lr > 0:
        raise ValueError(f"--lr must be positive, got {args.lr}")
    if args.target_accept is not None and not 0 < args.target_accept < 1:
        raise ValueError(f"--target-accept must be in (0, 1), got {args.target_accept}")


def _list():
    import models

    found = models.available()
    width = max((len(n) for n in found), default=0)
    for name in sorted(found):
        module = found[name]
        print(f"{name:<{width}}  {getattr(module, 'DESCRIPTION', '')}")
    return found


def _fit_svi(spec, args, rng_key):
    from ppl_sparsegp import diagnostics

    gp = spec.gp
    key_fit, key_post = _split(rng_key)
    optim, elbo, used = svi_optimizer(gp, getattr(args, "optimizer", "natgrad"), args.lr,
                                      getattr(args, "gamma", None), spec.model_kwargs)
    result, fit_time = fit_svi(gp, spec.X, spec.y, num_steps=args.num_steps, lr=args.lr, rng_key=key_fit, optim=optim,
                               elbo=elbo, progress=args.progress, model_kwargs=spec.model_kwargs)
    idata = diagnostics.from_svi(result, gp, spec.X, spec.y, num_samples=args.samples,
                                 model_kwargs=spec.model_kwargs, rng_key=key_post)
    stats = {"final_loss": float(result.losses[-1]), "num_steps": args.num_steps, "lr": args.lr, "optimizer": used}
    return idata, fit_time, stats


def svi_optimizer(gp, optimizer: str = "natgrad", lr: float = 0.01, gamma: float | None = None,
                  model_kwargs=None):
    """The SVI optimiser and loss for ``gp``: ``(optim, elbo, name)``.

    ``"natgrad"`` (the default): :class:`~ppl_sparsegp.optim.NaturalGradient` steps for q(u) alternating
    with Adam(``lr``) on the other params, on :class:`~ppl_sparsegp.optim.AnalyticELBO`, for a SparseGP
    whose q(u) is full, diagonal or equal-block (γ: ``gamma``, taken as given; else NaturalGradient's
    default, 1 for a Gaussian likelihood, on the full batch, and a ramp from 1e-4 to 0.1 over 5 steps
    otherwise, both with the line search that keeps a step from raising the loss); anything else (no
    q(u): collapsed, sparse spectrum; a two-Kronecker q; ``residual`` other than "expected") falls back to
    Adam on ``TraceMeanField_ELBO``, as ``"adam"`` always does (``optim`` and ``elbo`` None: ``fit_svi``'s
    defaults).

    :raises ValueError: for an unknown ``optimizer``, or a ``gamma`` where Adam runs (``"adam"``, or a
        model without a natural-gradient step): γ would be ignored.
    """
    if optimizer not in ("natgrad", "adam"):
        raise ValueError(f"optimizer must be 'natgrad' or 'adam', got {optimizer!r}")
    if gamma is not None and optimizer == "adam":
        raise ValueError("--gamma is the natural-gradient step size and --optimizer adam runs no natural "
                         "gradients: drop --gamma (or use --optimizer natgrad)")
    if optimizer == "adam" or not _natgrad_ready(gp):
        if gamma is not None:
            raise ValueError(f"--gamma is the natural-gradient step size, but this model's "
                             f"{type(gp).__name__} has no natural-gradient step (no full, diagonal or "
                             f"equal-block q(u) on the SVGP bound) and SVI runs Adam: drop --gamma")
        return None, None, "adam"
    from numpyro.optim import Adam

    from ppl_sparsegp.likelihoods import Gaussian
    from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient, gamma_ramp

    full_batch = (model_kwargs or {}).get("batch_size") is None
    if gamma is not None:
        return NaturalGradient(gp, Adam(lr), gamma=gamma), AnalyticELBO(gp), "natgrad"
    default = None if isinstance(gp.likelihood, Gaussian) and full_batch else gamma_ramp(1e-4, 0.1, 5)
    return NaturalGradient(gp, Adam(lr), gamma=default, line_search=True), AnalyticELBO(gp), "natgrad"


def _natgrad_ready(gp) -> bool:
    """Whether natural-gradient steps apply: a SparseGP (SVGP bound) whose guide has, per latent GP, a
    full, diagonal or equal-block q (params ``<site>_loc`` and ``<site>_scale_tril`` or ``<site>_scale``)."""
    from ppl_sparsegp import SparseGP
    from ppl_sparsegp.approximations.common import site_names

    if not isinstance(gp, SparseGP) or gp.residual != "expected":
        return False
    names = set(site_names(gp, gp.guide, "param"))
    L = gp.num_latent_gps
    prefixes = [gp.site] if L == 1 else [f"{gp.site}_{l}" for l in range(L)]
    return all(f"{p}_loc" in names and (f"{p}_scale_tril" in names or f"{p}_scale" in names) for p in prefixes)


def _fit_nuts(spec, args, rng_key):
    import jax
    from numpyro.infer import init_to_median, init_to_value

    from ppl_sparsegp import diagnostics

    gp = spec.gp
    kwargs = dict(spec.model_kwargs)
    if kwargs.get("batch_size") is not None:
        print("note: NUTS uses all data; ignoring batch_size", file=sys.stderr)
        kwargs["batch_size"] = None
    parallel = jax.local_device_count() >= args.chains
    # a model's own starting values (the other sites start uniformly in (−2, 2), NumPyro's fallback)
    init = init_to_median(num_samples=15) if spec.init is None else init_to_value(values=spec.init)
    key_fit, key_post = _split(rng_key)
    mcmc, fit_time = fit_nuts(gp.model, spec.X, spec.y, rng_key=key_fit, num_warmup=args.warmup,
                              num_samples=args.samples, num_chains=args.chains,
                              target_accept_prob=args.target_accept,
                              max_tree_depth=args.max_tree_depth, dense_mass=bool(args.dense_mass),
                              init_strategy=init, chain_method="parallel" if parallel else "sequential",
                              progress=args.progress, model_kwargs=kwargs)
    idata = diagnostics.from_mcmc(mcmc, gp, spec.X, spec.y, model_kwargs=kwargs, rng_key=key_post)
    stats = {"num_divergences": int(idata.sample_stats["diverging"].sum()), "warmup": args.warmup,
             "samples": args.samples, "chains": args.chains, "dense_mass": bool(args.dense_mass),
             "mean_tree_depth": float(idata.sample_stats["tree_depth"].mean()),
             "chain_method": "parallel" if parallel else "sequential"}
    return idata, fit_time, stats


def _fit_map(spec, args, rng_key):
    """Type-II ML / MAP of the hyperparameters by L-BFGS (for models whose only unknowns are
    hyperparameters: the collapsed ones declare "map"); stored like an SVI fit of the point guide."""
    from ppl_sparsegp import diagnostics
    from ppl_sparsegp.approximations import map_lbfgs

    gp = spec.gp
    _, key_post = _split(rng_key)
    values, info = map_lbfgs(gp.model, gp.hyperparameter_sites(), model_args=(spec.X, spec.y),
                             model_kwargs=spec.model_kwargs, init=spec.init, num_steps=args.num_steps,
                             rng_key=args.seed)
    params = {f"{k}_map": v for k, v in values.items()}
    idata = diagnostics.from_svi(params, gp, spec.X, spec.y, num_samples=args.samples,
                                 model_kwargs=spec.model_kwargs, rng_key=key_post)
    stats = {k: info[k] for k in ("iterations", "evaluations", "neg_log_joint", "success", "compile_s")}
    if not info["success"]:
        print(f"note: L-BFGS stopped without converging: {info['message']}", file=sys.stderr)
    return idata, info["time_s"], stats


def _fit_stein(spec, args, rng_key):
    stein = spec.extra.get("stein")
    if stein is None:
        raise ValueError(f"model {spec.name!r} lists 'stein' but defines no spec.extra['stein'] routine")
    t0 = time.perf_counter()
    result, idata = stein(spec, args, rng_key)
    return idata, time.perf_counter() - t0, {}


def _split(key):
    import jax

    return jax.random.split(key)


def _adequacy(spec, idata):
    """diagnostics.adequacy of the fitted approximation at the training inputs (None where the posterior
    has no single feature per draw, e.g. Stein particles of frequencies)."""
    from ppl_sparsegp import diagnostics

    if "particle" in idata.posterior.dims:
        return None
    # point-estimated hyperparameters (SVI, MAP) are evaluated once there, whatever max_draws
    return diagnostics.adequacy(spec.gp, idata, spec.X, max_draws=200)


def _refinement(spec, args, idata):
    """diagnostics.refinement_check of a NUTS fit (None for other methods or features without a
    refinement rule, with the reason on stderr)."""
    from ppl_sparsegp import diagnostics

    if args.method != "nuts":
        return None
    kwargs = {k: v for k, v in spec.model_kwargs.items() if k != "batch_size"}
    try:
        return diagnostics.refinement_check(spec.gp.model, idata, spec.X, spec.y, **kwargs)
    except ValueError as err:
        print(f"note: no refinement check: {err}", file=sys.stderr)
        return None


def _var_names(spec, idata):
    names = spec.var_names or list(spec.gp.hyperparameter_sites())
    return [n for n in names if n in idata.posterior] or list(idata.posterior.data_vars)


def _save_fit(spec, args, idata, path, fit_time, stats) -> list:
    """Write the approximation and its SVI/MAP params to ``path`` (:func:`ppl_sparsegp.saving.save_fit`);
    a collapsed model keeps the training data it conditions on unless it holds precomputed statistics.
    A model the fit format cannot describe is reported, not fatal: ``[]`` then, else ``["fit.npz"]``."""
    from ppl_sparsegp import diagnostics
    from ppl_sparsegp.saving import FitFileError, save_fit

    gp = spec.gp if getattr(spec.gp, "precomputed", None) is not None else spec.gp.with_data(spec.X, spec.y)
    metadata = {"model": spec.name, "method": args.method, "seed": args.seed, "num_steps": args.num_steps,
                "lr": args.lr, "fit_time_s": round(fit_time, 3),
                "final_loss": stats.get("final_loss", stats.get("neg_log_joint")),
                "num_train": int(len(spec.y)), "model_kwargs": {k: v for k, v in spec.model_kwargs.items()
                                                                if isinstance(v, (int, float, str, bool))}}
    try:
        save_fit(path, gp, diagnostics.svi_params(idata), metadata=metadata)
    except FitFileError as e:
        print(f"note: {path.name} not written: {e}", file=sys.stderr)
        return []
    return [path.name]


def _plot_loss(losses, path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(losses)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (negative ELBO)")
    ax.set_yscale("symlog")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def fit(spec, args):
    """Run ``args.method`` on ``spec``, write the outputs into ``args.out``; returns a result dict."""
    import jax

    from ppl_sparsegp import diagnostics

    fitters = {"svi": _fit_svi, "nuts": _fit_nuts, "stein": _fit_stein, "map": _fit_map}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng_key = jax.random.PRNGKey(args.seed)
    idata, fit_time, stats = fitters[args.method](spec, args, rng_key)
    check = _adequacy(spec, idata)
    if check is not None:
        diagnostics.add_adequacy(idata, check)
        stats["adequacy_residual_q95"] = check["q95"]
        stats["adequacy_ok"] = check["ok"]

    refinement = _refinement(spec, args, idata) if getattr(args, "refine", False) else None
    if refinement is not None:
        diagnostics.add_adequacy(idata, refinement)
        stats["refinement_ok"] = refinement["ok"]

    diagnostics.save(idata, out / "idata.nc")
    written = ["idata.nc"]
    if args.method in ("svi", "map"):
        written += _save_fit(spec, args, idata, out / "fit.npz", fit_time, stats)
    var_names = _var_names(spec, idata)
    table = diagnostics.summary(idata, var_names=var_names)
    (out / "summary.txt").write_text(table.to_string() + "\n")
    metrics = {"model": spec.name, "method": args.method, "seed": args.seed,
               "fit_time_s": round(fit_time, 3), **stats}
    if spec.evaluate is not None:
        metrics.update(spec.evaluate(spec, idata))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    plots = []
    if spec.plot is not None:
        spec.plot(spec, idata, out / "fit.png")
        plots.append(out / "fit.png")
    if args.method == "nuts":
        plots.append(Path(diagnostics.plot_trace(idata, var_names, out / "trace.png")))
    svi_group = getattr(idata, diagnostics.SVI_GROUP, None)
    if svi_group is not None and "loss" in svi_group:
        _plot_loss(svi_group["loss"].values, out / "loss.png")
        plots.append(out / "loss.png")

    print(f"\n{spec.name} / {args.method}: summary")
    print(table.to_string())
    print("\nadequacy: " + (check["message"] if check is not None else
                            "not available for this fit (particle posteriors have no single feature)"))
    if check is not None and not check["ok"]:
        print(f"warning: the approximation for the posterior it found is {check['message']}", file=sys.stderr)
    if getattr(args, "refine", False):
        print("refinement: " + (refinement["message"] if refinement is not None else
                                "available after a NUTS fit of a model whose features have a refinement rule"))
    print("\nmetrics")
    print(json.dumps(metrics, indent=2, default=float))
    print(f"\nwrote {out}/: {' '.join(written)} summary.txt metrics.json " + " ".join(p.name for p in plots))
    return {"out": out, "idata": idata, "summary": table, "metrics": metrics, "plots": plots}


# what a user's input can cause (flags, data files, model settings the library refuses): one line on
# stderr and exit status 2, as argparse does for bad flags; any other exception is a bug and keeps its
# traceback
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError,
               NonFiniteLossError, SVIDivergenceError)


def _user_error(parser, error):
    """Print ``<prog>: error: <message>`` on one line to stderr and exit with status 2."""
    message = " ".join(str(error).split()) or type(error).__name__
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
    """Entry point of ``python -m inference``; returns the models dict (list) or fit's result dict."""
    argv = list(sys.argv[1:] if argv is None else argv)
    model_name = argv[1] if len(argv) > 1 and argv[0] == "fit" and not argv[1].startswith("-") else None
    module = None
    if model_name is not None:
        import models

        try:
            module = models.get(model_name)
        except ValueError as e:
            _parser().error(str(e))
    parser = _parser(model_name, module)
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()

    _configure_jax(_planned_chains(args, module))
    try:
        spec = module.build(args)
        if args.method is None:
            args.method = spec.methods[0]
        if args.method not in spec.methods:
            raise ValueError(f"model {spec.name!r} does not support --method {args.method}; "
                             f"supported: {', '.join(spec.methods)}")
        _resolve(args, spec)
        if args.out is None:
            args.out = Path("runs") / f"{model_name}-{args.method}"
        return fit(spec, args)
    except USER_ERRORS as e:
        _user_error(parser, e)

