"""Validation by construction (issue 49): the probe's cases, a coverage test that makes every public callable
join, bad inputs generated from the declarations, and property-based tests of the numeric options.

* ``PROBE``: each silent acceptance and obscure error the issue's probe found, one row each (entry point, bad
  input, exception, the words the message must contain: the argument and the fix).
* ``test_every_public_parameter_is_declared_or_exempt``: every parameter of every public callable (the
  ``__all__`` of each public module, the public methods of the classes they export) has a declared constraint
  (:mod:`ppl_sparsegp.validation`) or a reasoned exemption (``EXEMPT_*`` below), with no table of gaps:
  a new public callable cannot land undeclared.
* ``test_declared_bad_inputs_are_refused_naming_the_parameter``: for every declaration, the bad values its
  constraint implies (NaN, ±inf, 0 or a negative where the range excludes them, a wrong type, a wrong rank)
  fed to the real callable through its wrapper, the other arguments at valid examples: a new declaration
  brings its own rows.
* Hypothesis: numeric options fed NaN, ±inf, 0, negative and huge values give a clear error naming the
  parameter or a finite, checked result.

No fit runs here except one L-BFGS pilot of 1 iteration on 12 points (the warning that it stopped short)."""
import functools
import importlib
import inspect
import math
import pkgutil

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from numpyro import handlers
from regression import assert_refused

import ppl_sparsegp as psg
from ppl_sparsegp import diagnostics
from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient, gamma_ramp, gamma_schedule
from ppl_sparsegp.saving import load_fit, save_fit

jax.config.update("jax_enable_x64", True)

N = 20
x = np.linspace(0.0, 1.0, N)
y = np.sin(6 * x)
VFF = psg.FourierFeatures(-1.0, 2.0, 8)
K = psg.Matern32(1.0, 0.3)
ELL = dist.LogNormal(np.log(0.3), 0.3)
KT = psg.Matern32(1.0, ELL)
SGP = psg.SparseGP(psg.FourierFeatures(-1.0, 2.0, 5), K, psg.Gaussian(0.1))
CGP = psg.CollapsedGP(psg.FourierFeatures(-1.0, 2.0, 5), K, psg.Gaussian(0.1))


def run(model):
    return handlers.trace(handlers.seed(model, rng_seed=0)).get_trace()


def ell_model(x, y=None, features=None):
    ell = numpyro.sample("ell", ELL)
    psg.marginal_spectral_gp("y", (VFF if features is None else features, psg.Matern32(1.0, ell)), x, y, 0.1)


def renamed_model(x, y=None):
    ell = numpyro.sample("lengthscale", ELL)
    psg.marginal_spectral_gp("y", (VFF, psg.Matern32(1.0, ell)), x, y, 0.1)


def choose(**kwargs):
    return lambda: psg.choose_features(ell_model, x, y, **kwargs)


def exact(X, kernel=K, **kwargs):
    return lambda: run(lambda: psg.marginal_spectral_gp("y", (None, kernel), X, np.zeros(len(X)), 0.1, exact=True,
                                                        **kwargs))


def elbo_loss(**kwargs):
    def call():
        elbo = AnalyticELBO(SGP)
        svi = numpyro.infer.SVI(SGP.model, SGP.guide, numpyro.optim.Adam(0.01), elbo)
        params = svi.get_params(svi.init(jax.random.PRNGKey(0), x[:, None], y))
        return elbo.loss(jax.random.PRNGKey(0), params, SGP.model, SGP.guide, x[:, None], y, **kwargs)
    return call


def adequacy(samples, **kwargs):
    return lambda: diagnostics.adequacy(VFF, samples, x, kernel=KT, **kwargs)


def refinement(samples):
    return lambda: diagnostics.refinement_check(ell_model, samples, x, y, refit=False)


def integral_transform_kuu():
    from ppl_sparsegp.features.integral_transform import IntegralTransformFeatures
    feature = IntegralTransformFeatures(np.ones((4, 2)), np.zeros((4, 2)))
    return psg.Kuu(feature, psg.SquaredExponential(1.0, [0.3, 0.3, 0.3]))


def add_other_fits_result():
    idata = az.from_dict(posterior={"f_kernel_lengthscale": np.full((2, 20), 0.3)})
    return diagnostics.add_adequacy(idata, diagnostics.adequacy(VFF, {"f_kernel_lengthscale": jnp.full(7, 0.3)},
                                                                x, kernel=KT))


def edited_fit(tmp):
    """A collapsed fit whose header's kernel variance was edited to −1 (the arrays rewritten as they are)."""
    path = save_fit(str(tmp / "fit.npz"), CGP.with_data(x[:, None], y), {})
    import json
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays["fit.json"]))
    key = header["model"]["args"]["kernel"]["fields"]["variance"]["__array__"]
    arrays[key] = -np.abs(arrays[key])
    np.savez(str(tmp / "edited.npz"), **arrays)
    return load_fit(str(tmp / "edited.npz"))


def own_fit_into_another_model(tmp):
    path = save_fit(str(tmp / "own.npz"), ell_model, {"ell": jnp.full(5, 0.3)}, model_args={"x": x})
    return load_fit(path, model=renamed_model)


# (id, call, exception, words the message must contain). Calls that need a folder take it as `tmp`.
PROBE = [
    # --- choose_features and resized ------------------------------------------------------------
    ("choose_features/num_steps=0", choose(num_steps=0), ValueError,
     ["choose_features", "num_steps", "positive integer"]),
    ("choose_features/log_mass_gap=-1", choose(log_mass_gap=-1.0), ValueError, ["log_mass_gap", ">= 0"]),
    ("choose_features/quantile nan", choose(quantile=math.nan), ValueError, ["quantile", "finite"]),
    ("choose_features/unknown option tolerance=", choose(tolerance=0.1), TypeError,
     ["tolerance", "neither an option of choose_features", "nor a parameter of the model"]),
    ("choose_features/misspelt option", choose(max_feature=10), TypeError,
     ["max_feature", "did you mean max_features"]),
    ("choose_features/refine 1.5", choose(refine=1.5), TypeError, ["refine", "integer"]),
    ("resized/tolerance 0", lambda: VFF.resized(x, K, 0.0), ValueError, ["resized", "tolerance", "(0, 1)"]),
    ("resized/tolerance nan", lambda: VFF.resized(x, K, math.nan), ValueError, ["tolerance", "finite"]),
    ("resized/kernel not a kernel", lambda: VFF.resized(x, "matern", 0.01), TypeError, ["kernel", "Matern32"]),
    ("AdditiveFeatures.resized/tolerance 1", lambda: psg.AdditiveFeatures([VFF, VFF]).resized(
        np.ones((3, 2)), psg.Additive([K, K]), 1.0), ValueError, ["tolerance"]),
    # --- natural gradients ------------------------------------------------------------------------
    ("NaturalGradient(123)", lambda: NaturalGradient(123), TypeError, ["sites", "SparseGP", "'f_v'"]),
    ("NaturalGradient/optim='adam'", lambda: NaturalGradient(SGP, "adam"), TypeError, ["optim", "Adam(0.01)"]),
    ("NaturalGradient/a CollapsedGP", lambda: NaturalGradient(CGP), TypeError, ["sites", "CollapsedGP", "map_lbfgs"]),
    ("NaturalGradient/schedule gives -0.5", lambda: NaturalGradient(SGP, gamma=lambda t: -0.5 + 0 * t), ValueError,
     ["gamma", "-0.5", "step 0", "(0, 1]"]),
    ("NaturalGradient/schedule gives 3 later",
     lambda: NaturalGradient(SGP, gamma=lambda t: jnp.where(t > 50, 3.0, 0.5)), ValueError,
     ["gamma", "γ = 3", "(0, 1]"]),
    ("gamma_ramp/start nan", lambda: gamma_ramp(math.nan), ValueError, ["gamma_ramp", "start", "finite"]),
    ("gamma_schedule/tau 0", lambda: gamma_schedule(tau=0.0), ValueError, ["tau", ">= 1e-12"]),
    ("AnalyticELBO/a CollapsedGP", lambda: AnalyticELBO(CGP), TypeError, ["gp", "SparseGP"]),
    ("AnalyticELBO/num_data=-5", elbo_loss(num_data=-5), ValueError, ["num_data", "positive integer"]),
    ("AnalyticELBO/num_data below the rows", elbo_loss(num_data=5), ValueError, ["num_data", "20 rows"]),
    ("AnalyticELBO/batch_size above the rows", elbo_loss(batch_size=50), ValueError, ["batch_size", "20"]),
    # --- features, the exact GP -------------------------------------------------------------------
    ("IntegralTransformFeatures/3 lengthscales in 2-D", integral_transform_kuu, ValueError,
     ["lengthscales", "D = 2", "one lengthscale or 2"]),
    ("marginal exact/2-D X, 1-D kernel", exact(np.zeros((N, 2)), psg.Matern32(1.0, [0.3])), ValueError,
     ["exact=True", "X has 2", "'y_gp0'", "(N, 1)"]),
    ("marginal exact/N above max_exact_rows", exact(np.linspace(0, 1, 30), max_exact_rows=10), ValueError,
     ["N = 30", "GiB", "max_exact_rows", "subsample", "choose_features"]),
    ("marginal/exact=1", lambda: run(lambda: psg.marginal_spectral_gp("y", (None, K), x, y, 0.1, exact=1)), TypeError,
     ["exact", "True or False"]),
    ("marginal/misspelt exact", lambda: run(lambda: psg.marginal_spectral_gp("y", (None, K), x, y, 0.1, exakt=True)),
     TypeError, ["exakt", "did you mean exact"]),
    # --- checks that judge what they were given ------------------------------------------------
    ("adequacy/lengthscale site missing", adequacy({"other": jnp.ones(5)}), ValueError,
     ["f_kernel_lengthscale", "prefix", "f_kernel_"]),
    ("adequacy/default name, sites trend_*", adequacy({"trend_kernel_lengthscale": jnp.full(5, 0.3)}), ValueError,
     ["f_kernel_lengthscale", "trend_kernel_lengthscale", "name="]),
    ("adequacy/ragged draws", adequacy({"f_kernel_lengthscale": jnp.full(5, 0.3), "other": jnp.ones(3)}), ValueError,
     ["ragged", "5", "3"]),
    ("adequacy/chain-grouped draws", adequacy({"f_kernel_lengthscale": jnp.full((2, 5), 0.3)}), ValueError,
     ["chain", "group_by_chain=False"]),
    ("adequacy/GP's kernel site missing", lambda: diagnostics.adequacy(psg.CollapsedGP(VFF, KT, psg.Gaussian(0.1)),
                                                                      {"likelihood_noise": jnp.ones(4)}, x),
     ValueError, ["kernel_lengthscale", "params="]),
    ("refinement_check/chain-grouped draws", refinement({"ell": jnp.full((2, 4), 0.3) + jnp.linspace(0, 0.01, 4)}),
     ValueError, ["refinement_check", "chain", "group_by_chain=False"]),
    ("add_adequacy/another fit's 7-draw result", add_other_fits_result, ValueError, ["7 draws", "40", "another fit"]),
    ("add_adequacy/a dict", lambda: diagnostics.add_adequacy({"ell": np.ones(4)}, {"residual_fraction": np.ones(4),
                                                                                  "median": 0.0, "q95": 0.0,
                                                                                  "ok": True, "message": ""}),
     TypeError, ["idata", "InferenceData", "dict"]),
    # --- files ------------------------------------------------------------------------------------
    ("load_fit/edited header: negative variance", edited_fit, ValueError, ["variance", "positive", "edited"]),
    ("load_fit/own fit into a model of other sites", own_fit_into_another_model, ValueError,
     ["'ell'", "lengthscale", "prior"]),
    ("load_fit/path 3", lambda: load_fit(3), TypeError, ["load_fit", "path"]),
]


@pytest.mark.parametrize("call, exception, words", [c[1:] for c in PROBE], ids=[c[0] for c in PROBE])
def test_the_probes_cases_are_refused_naming_the_argument(call, exception, words, tmp_path):
    assert_refused(call, exception, words, tmp_path)


def test_a_pilot_that_stops_short_says_so():
    """num_steps=1: L-BFGS stops at its limit, not at an optimum; choose_features says so (it used to choose
    silently from the unconverged point)."""
    xs = np.linspace(0.0, 1.0, 12)
    with pytest.warns(UserWarning, match="stopped short after num_steps=1"):
        psg.choose_features(ell_model, xs, np.sin(6 * xs), starts=1, refine=0, num_steps=1)


def test_an_own_fit_loads_into_its_own_model_and_a_valid_header_loads(tmp_path):
    """The new refusals do not refuse the valid case: the own model's fit loads for its own model; an
    unedited collapsed fit loads and predicts as the saved one."""
    path = save_fit(str(tmp_path / "own.npz"), ell_model, {"ell": jnp.full(5, 0.3)}, model_args={"x": x})
    model_args, samples = load_fit(path, model=ell_model)
    assert set(samples) == {"ell"} and np.allclose(model_args["x"], x)
    gp = CGP.with_data(x[:, None], y)
    back, params = load_fit(save_fit(str(tmp_path / "c.npz"), gp, {}))
    before, after = gp.predict(x[:3, None], params={}), back.predict(x[:3, None], params=params)
    assert np.array_equal(after["f_mean"], before["f_mean"])


# --- the coverage test ----------------------------------------------------------------------------
def _public_modules():
    names = ["ppl_sparsegp"] + [m.name for m in pkgutil.walk_packages(psg.__path__, "ppl_sparsegp.")
                                if not any(p.startswith("_") for p in m.name.split("."))]
    return [importlib.import_module(n) for n in names]


def public_callables() -> dict:
    """``{qualified name: function}``: every function in the ``__all__`` of a public module, and the
    constructor and public methods (those a class defines itself) of every class there, defined in ppl_sparsegp."""
    out = {}
    for module in _public_modules():
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not getattr(obj, "__module__", "").startswith("ppl_sparsegp"):
                continue
            if inspect.isclass(obj):
                home = f"{obj.__module__}.{obj.__qualname__}"
                if "__init__" in vars(obj):
                    out.setdefault(f"{home}.__init__", vars(obj)["__init__"])
                for attr, member in vars(obj).items():
                    fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                    if not attr.startswith("_") and inspect.isfunction(fn):
                        out.setdefault(f"{home}.{attr}", fn)
            elif inspect.isfunction(obj):
                out.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return out


#: modules whose public callables are the library's internals (the API reference's "Internals" section):
#: called by the approximations on arguments already validated at the public entry points, under tracing
EXEMPT_MODULES = {
    "ppl_sparsegp.linalg": "structured operators: built and called by the library on validated, often traced, values",
    "ppl_sparsegp.covariances": "the Kuu/Kuf dispatchers: called under tracing by the approximations on their inputs",
    "ppl_sparsegp.conditionals": "the default q(u) -> q(f): called under tracing on validated values",
    "ppl_sparsegp.gaussian": "the structured Gaussian: called under tracing on validated values",
    "ppl_sparsegp.numpyro_internals": "wrappers of private JAX/NumPyro APIs: called by the library only",
    "ppl_sparsegp.validation": "the mechanism itself",
}

#: methods of a protocol the library implements for NumPyro (distributions, ELBOs, optimisers): NumPyro
#: calls them, under tracing, with its own values
EXEMPT_PROTOCOL = {"log_prob", "sample", "sample_with_intermediates", "mean", "variance", "support", "init",
                   "update", "get_params", "eval_and_update", "eval_and_stable_update", "tree_flatten",
                   "tree_unflatten", "infer_shapes", "entropy", "cdf", "icdf", "enumerate_support", "loss",
                   "loss_with_mutable_state", "loss_with_mutable_state_and_aux", "vmap_over"}

#: the numeric core of kernels, likelihoods and features: evaluated by the approximations inside the traced
#: model (jit, grad, NUTS), so their values are tracers no Python check can judge; the concrete case is
#: judged by the one input check inside (check_inputs, Likelihood.validate) and by debug_checks
EXEMPT_TRACED = {"dist", "diag", "predict_mean_and_var", "variational_expectation", "profile", "predict_log_density",
                 "kappa", "power", "sample_frequencies", "spectral_density", "sample_unit_frequencies",
                 "log_unit_density", "log_spectral_density_normalised", "class_probabilities", "argmax_probability",
                 "loo_log_prob", "relative_jitter", "subsample", "scaled_sqdist", "profile_of_lag", "embed",
                 "to_sphere", "to_domain", "monte_carlo_conditional", "optimal_q", "components", "components_from",
                 "point_values", "fourier_coefficients"}

#: the checks, warnings and advice helpers themselves (their arguments are what they judge, from the library)
EXEMPT_CHECKERS = {"check_inputs", "check_kernel", "check_dim", "warn_outside", "warn_float32",
                   "warn_float32_gpu_matmul", "validate", "adequacy_advice", "check_free_hyperparameters",
                   "refinement_note", "refinement_advice"}

#: constructors of what the library builds and hands back, never built from a user's input: NumPyro
#: distributions made inside the traced model (and rebuilt by jax.tree_util on unflatten, where a Python
#: check would judge placeholders), a result record, and the exceptions the SVI loop raises
EXEMPT_BUILT_BY_THE_LIBRARY = {
    "ppl_sparsegp.approximations.exact_marginal.ExactMarginalGaussian.__init__":
        "the exact=True site's distribution, built by marginal_spectral_gp from its validated arguments",
    "ppl_sparsegp.approximations.marginal_gaussian.MarginalGaussian.__init__":
        "the site's distribution, built by marginal_spectral_gp from its validated arguments (its shapes "
        "against each other are checked in the body)",
    "ppl_sparsegp.approximations.spectrum.SparseSpectrumNormal.__init__":
        "SparseSpectrumGP's site distribution, built inside the traced model (loc/diag against W in the body)",
    "ppl_sparsegp.approximations.spherical_fit.SphericalFit.__init__": "fit_spherical's result record",
    "ppl_sparsegp.engines.NonFiniteLossError.__init__": "raised by fit_svi with what it saw",
    "ppl_sparsegp.engines.SVIDivergenceError.__init__": "raised by fit_svi with what it saw",
}

#: parameter names exempt everywhere, with the reason
EXEMPT_PARAMETERS = {
    "model": "a user's NumPyro model: checked by tracing it (its sites), not by a type",
    "guide": "a NumPyro guide: checked by tracing it",
}


#: parameters judged in the body (against each other, or a structure no declaration states), by
#: "qualified name:parameter" (or the qualified name alone: each of its parameters), with the reason
EXEMPT_IN_BODY = {
    "ppl_sparsegp.sharding.map_rows:out_rows": "a pytree of ints shaped like fn's output (a prefix of it): each leaf "
                                               "is judged in the body, before fn runs (map_rows: out_rows must hold "
                                               "non-negative ints)",
    "ppl_sparsegp.stein.FrequencyRBFKernel.compute": "SteinKernel protocol: SteinVI calls it, under tracing, with its "
                                                     "own particles and loss",
    "ppl_sparsegp.stein.FrequencySteinVI.kernel_divergence": "a hook of SteinVIWithDivergence: SteinVI's update calls "
                                                              "it, under tracing, with the kernel it built",
}


def _exempt(qualname, param) -> str | None:
    if qualname in EXEMPT_BUILT_BY_THE_LIBRARY:
        return EXEMPT_BUILT_BY_THE_LIBRARY[qualname]
    why = EXEMPT_IN_BODY.get(f"{qualname}:{param.name}") or EXEMPT_IN_BODY.get(qualname)
    if why:
        return why
    for prefix, why in EXEMPT_MODULES.items():
        if qualname.startswith(prefix + "."):
            return why
    method = qualname.rsplit(".", 1)[1]
    if method in EXEMPT_PROTOCOL:
        return "a NumPyro protocol method"
    if method in EXEMPT_TRACED and "." in qualname.removeprefix("ppl_sparsegp.").split(".", 1)[1]:
        return "a numeric method evaluated inside traced models (EXEMPT_TRACED)"
    if method in EXEMPT_CHECKERS:
        return "a check or warning helper: its arguments are what it judges"
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        return "forwarded (the model's data or options): checked where they land"
    return EXEMPT_PARAMETERS.get(param.name)


def _undeclared() -> dict:
    from ppl_sparsegp.validation import declared

    out = {}
    for qualname, fn in sorted(public_callables().items()):
        params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
        have = declared(fn)
        missing = tuple(p.name for p in params if p.name not in have and _exempt(qualname, p) is None)
        if missing:
            out[qualname] = missing
    return out


def test_every_public_parameter_is_declared_or_exempt():
    """Every public parameter has a declared constraint or a reasoned exemption (there is no list of
    parameters left to declare: the last 666 were declared or left the public surface)."""
    undeclared = _undeclared()
    assert not undeclared, ("declare these public parameters (Annotated hints read by @validated, "
                            f"ppl_sparsegp.validation) or give a reasoned exemption: {undeclared}")


# --- bad inputs generated from the declarations ----------------------------------------------------
@functools.lru_cache(maxsize=None)
def _statistics():
    """The sufficient statistics of (x, y) for SGP's feature (an example of SufficientStatistics)."""
    from ppl_sparsegp.covariances import Kuf, SufficientStatistics

    return SufficientStatistics.from_kuf(Kuf(SGP.feature, K, x[:, None]), jnp.asarray(y), keep_root=True)


def _instances() -> list:
    return [K, SGP, CGP, VFF, psg.Gaussian(0.1), "path.npz", numpyro.optim.Adam(0.01), {}, (), az.InferenceData(),
            psg.SphericalHarmonicFeatures(2, 2), psg.ArcCosine(order=1), ell_model, psg.linalg.Identity(3),
            _statistics()] + _more_instances()


def _more_instances() -> list:
    """Instances the Stein and diagnostics declarations need (an MCMC object, a Stein result, a spectrum GP, a
    prior), built once."""
    if not _MORE:
        from ppl_sparsegp.stein import SteinResult

        _MORE.extend([numpyro.infer.MCMC(numpyro.infer.NUTS(ell_model), num_warmup=1, num_samples=1),
                      SteinResult({"w": np.ones((2, 3, 1))}, {}, {}, np.ones(2), None, None),
                      psg.SparseSpectrumGP(K, psg.Gaussian(0.1), num_frequencies=2, input_dim=1), ELL])
    return _MORE


_MORE = []


def _example(check):
    """A value the check accepts (an instance from ``_instances`` for InstanceOf)."""
    from ppl_sparsegp.validation import AnyOf, InstanceOf, OrNone

    if isinstance(check, OrNone):
        return None
    if isinstance(check, AnyOf):
        return _example(check.checks[0])
    if isinstance(check, InstanceOf):
        return next(v for v in _instances() if check.problem(v) is None)
    return check.example()


def _rows(fn) -> list:
    """``[(parameter, index, bad value)]``: every bad value each declared check of ``fn`` implies."""
    from ppl_sparsegp.validation import declared

    return [(name, i, bad) for name, check in declared(fn).items() for i, bad in enumerate(check.bad_values())]


def _generated_cases():
    """One case per declared callable, holding all of its rows (a pytest item per row cost ~17 ms of the
    suite's time each, for ~1 100 rows then and twice that soon; one item per callable runs the same rows
    with the same checks, and a failure names each failing row as ``callable:parameter:index``)."""
    try:
        from ppl_sparsegp.validation import declared
    except ImportError:  # a library without the mechanism: one row, which fails
        return [pytest.param("ppl_sparsegp.none", None, id="no-validation-module")]

    return [pytest.param(qualname, fn, id=qualname.removeprefix("ppl_sparsegp."))
            for qualname, fn in sorted(public_callables().items()) if declared(fn)]


class _Placeholder:
    """Stands for an undeclared argument (and ``self``): the declared check refuses the bad value first."""


def _call(fn, name, value):
    from ppl_sparsegp.validation import declared

    checks = declared(fn)
    signature = inspect.signature(fn)
    args, kwargs, skipped = [], {}, False
    for p in signature.parameters.values():
        if p.kind is p.VAR_POSITIONAL or p.kind is p.VAR_KEYWORD:
            continue
        if p.name == name:
            v = value
        elif p.default is not p.empty:
            skipped = True  # the later ones go by keyword
            continue
        elif p.name in checks:
            v = _example(checks[p.name])
        else:
            v = _Placeholder()
        if p.kind is p.KEYWORD_ONLY or (skipped and p.kind is not p.POSITIONAL_ONLY):
            kwargs[p.name] = v
        else:
            args.append(v)
    return fn(*args, **kwargs)


def _refusal_problem(qualname, fn, name, bad):
    """None if ``fn`` with ``name=bad`` (the others at valid examples) raises InvalidArgument naming the
    parameter and the callable with "must be"; else what went wrong (another exception propagates, as
    under ``pytest.raises``)."""
    from ppl_sparsegp.validation import InvalidArgument

    try:
        _call(fn, name, bad)
    except InvalidArgument as err:
        message = str(err)
    else:
        return "DID NOT RAISE InvalidArgument"
    function = qualname.rsplit(".", 1)[1] if not qualname.endswith("__init__") else qualname.rsplit(".", 2)[1]
    return None if name in message and function in message and "must be" in message else message


@pytest.mark.parametrize("qualname, fn", _generated_cases())
def test_declared_bad_inputs_are_refused_naming_the_parameter(qualname, fn):
    """Every row of the callable (each bad value of each declared parameter) is refused with an
    InvalidArgument whose message names the parameter and the callable and says "must be"."""
    from ppl_sparsegp.validation import declared

    assert declared(fn)
    rows = _rows(fn)
    assert rows  # test_the_generated_rows_cover_every_declaration names the declaration without one
    failed = []
    for name, i, bad in rows:
        try:
            problem = _refusal_problem(qualname, fn, name, bad)
        except Exception as err:  # noqa: BLE001 -- another exception fails its row, as under pytest.raises
            problem = f"raised {type(err).__name__}, not InvalidArgument: {err}"
        if problem is not None:
            failed.append(f"{qualname.removeprefix('ppl_sparsegp.')}:{name}:{i} ({bad!r}): {problem}")
    assert not failed, f"{len(failed)} of {len(rows)} rows not refused naming the parameter:\n" + "\n".join(failed)


def test_the_generated_rows_cover_every_declaration():
    """Each declaration brings at least one bad value (a check without rows would test nothing), and the
    generated cases hold every declared callable, so every declaration's rows run."""
    from ppl_sparsegp.validation import declared

    callables = public_callables()
    empty = [(q, n) for q, fn in callables.items() for n, c in declared(fn).items() if not c.bad_values()]
    assert not empty, empty
    run = {case.values[0] for case in _generated_cases()}
    missing = sorted(q for q, fn in callables.items() if declared(fn) and q not in run)
    assert not missing, missing


# --- property-based tests ---------------------------------------------------------------------------
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, -1.0, 1e308, -1e308,
                                                                                     1e-320, 1.0, 0.5]),
                    st.integers(-10**6, 10**6))
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _names_the_parameter(err, name):
    return isinstance(err, (ValueError, TypeError)) and name in str(err)


@FAST
@given(start=NUMBERS, end=NUMBERS, steps=st.one_of(st.integers(-5, 50), NUMBERS))
@example(start=1.0, end=1e-320, steps=1)  # a subnormal γ: flushed to 0 by XLA, the ramp's first step NaN
def test_gamma_ramp_gives_a_clear_error_or_a_schedule_in_the_unit_interval(start, end, steps):
    try:
        gamma = gamma_ramp(start, end, steps)
    except (ValueError, TypeError) as err:
        assert any(_names_the_parameter(err, n) for n in ("start", "end", "num_steps")), err
        return
    values = np.asarray([gamma(t) for t in (0, 1, 5, 10**6)])
    assert np.all(np.isfinite(values)) and np.all((values > 0) & (values <= 1)), values
    assert values[-1] == pytest.approx(end)  # the ramp ends at `end`


@FAST
@given(peak=NUMBERS, tau=st.one_of(st.none(), NUMBERS), kappa=NUMBERS, floor=NUMBERS)
@example(peak=1e-320, tau=None, kappa=1.0, floor=0.0)  # a subnormal peak: every γ flushed to 0
def test_gamma_schedule_gives_a_clear_error_or_a_decaying_step_in_the_unit_interval(peak, tau, kappa, floor):
    try:
        gamma = gamma_schedule(peak=peak, ramp_steps=0, tau=tau, kappa=kappa, floor=floor)
    except (ValueError, TypeError) as err:
        assert any(_names_the_parameter(err, n) for n in ("peak", "tau", "kappa", "floor", "start")), err
        return
    values = np.asarray([gamma(t) for t in (0, 10, 10**4)])
    assert np.all(np.isfinite(values)) and np.all((values > 0) & (values <= 1)) and values[0] == pytest.approx(peak)
    assert np.all(np.diff(values) <= 0)


@FAST
@given(gamma=NUMBERS, as_schedule=st.booleans())
@example(gamma=-0.5, as_schedule=True)  # every step rejected: q never moves
@example(gamma=3.0, as_schedule=True)  # an overshooting step kept
def test_natural_gradient_gamma_is_refused_or_in_the_unit_interval(gamma, as_schedule):
    """A number or a schedule (``step -> γ``, here constant): refused naming gamma, or in (0, 1] at every step."""
    given_gamma = (lambda t: gamma + 0 * t) if as_schedule else gamma
    try:
        ng = NaturalGradient(SGP, gamma=given_gamma)
    except (ValueError, TypeError) as err:
        assert _names_the_parameter(err, "gamma"), err
        return
    values = np.asarray([float(ng.gamma(jnp.asarray(t))) for t in (0, 7, 10**5)])
    assert np.all((values > 0) & (values <= 1)), values
    assert np.allclose(values, float(gamma))


@FAST
@given(tolerance=NUMBERS, cap=st.one_of(st.none(), st.integers(-3, 400)))
def test_resized_gives_a_clear_error_or_a_feature_set_within_the_cap(tolerance, cap):
    try:
        feature = VFF.resized(x, K, tolerance, cap)
    except (ValueError, TypeError) as err:
        assert any(_names_the_parameter(err, n) for n in ("tolerance", "max_features")), err
        return
    assert 0 < tolerance < 1 and feature.num_features >= 1 and (cap is None or feature.num_features <= cap)
    # checked: the residual fraction at the data is within a factor of the tolerance asked (the rule's measured
    # 0.46-1.10 x tolerance, generous here for the smallest sets),
    # above the residual no number of frequencies removes (Matérn-3/2's boundary term on [lower, upper]: 9.4e-5
    # here, measured with 800 frequencies), or at the cap
    r = _residual(feature)
    capped = cap is not None and feature.num_features == (cap // 2) * 2 - 1
    assert r <= max(3 * tolerance + _residual(psg.FourierFeatures(-1.0, 2.0, 800)), 1e-12) or capped \
        or feature.num_features < 5, (r, feature.num_features)


def _residual(feature):
    """The median fraction of KT's prior variance at x that ``feature`` misses (diagnostics.adequacy)."""
    return diagnostics.adequacy(feature, {"f_kernel_lengthscale": jnp.full(1, 0.3)}, x, kernel=KT)["median"]


@FAST
@given(value=NUMBERS)
def test_declared_intervals_accept_exactly_their_finite_interior(value):
    """The Real and Integer checks against an independent predicate: accepted iff finite and inside."""
    from ppl_sparsegp.validation import Integer, Real

    for check, inside in ((Real(0.0, 1.0, low_open=True), lambda v: 0 < v <= 1),
                          (Real(0.5, 1.0, low_open=True), lambda v: 0.5 < v <= 1),
                          (Real(0.0, None), lambda v: v >= 0), (Integer(1), None)):
        ok = check.problem(value) is None
        if inside is None:
            assert ok == (isinstance(value, int) and value >= 1)
        else:
            assert ok == (math.isfinite(float(value)) and inside(float(value)))


@FAST
@given(rows=st.one_of(st.none(), st.integers(-3, 40), NUMBERS))
def test_max_exact_rows_is_refused_or_caps_the_exact_gp(rows):
    try:
        trace = exact(x[:, None], max_exact_rows=rows)()
    except (ValueError, TypeError) as err:
        assert _names_the_parameter(err, "max_exact_rows"), err
        if isinstance(rows, int) and rows >= 1:
            assert rows < N and f"N = {N}" in str(err)
        return
    assert rows is None or rows >= N
    assert np.isfinite(float(trace["y"]["fn"].log_prob(np.zeros(N))))


def test_library_warnings_name_the_users_line():
    """``warn_user`` attributes a warning to the first frame outside ``ppl_sparsegp`` (the @validated
    wrapper and the library's own calls skipped): here, this file, at the line of the call."""
    import warnings

    import ppl_sparsegp as psg
    from ppl_sparsegp.features.base import OutsideDomainWarning

    gp = psg.SparseGP(psg.FourierFeatures(0.0, 1.0, 4), psg.Matern32(1.0, 0.3), psg.Gaussian(0.01))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        gp.feature.warn_outside(np.array([[2.0]]), kernel=gp.kernel)
    outside = [w for w in seen if issubclass(w.category, OutsideDomainWarning)]
    assert outside and {(w.filename, w.lineno) for w in outside} == {(__file__, line)}
