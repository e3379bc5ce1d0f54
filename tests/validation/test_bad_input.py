"""The own-model API under bad input (issue 41): a table of (entry point, one bad or edge-case input, the
exception type, the words its message must contain: the argument's name and the fix), fed to every
public entry point of the own-model API: ``spectral_gp``, ``marginal_spectral_gp``, ``MarginalGaussian``,
``refinement_check``, ``add_adequacy``, ``from_mcmc``, the size rules (``from_data``), the spherical
features and ``spherical_statistics``, the templates and ``save_fit`` / ``load_fit``. A new entry point
joins the table. Every call is traced (``handlers.seed`` / ``handlers.trace``) or given tiny draws: no
NUTS run, so the module stays in the fast suite.

Below the table, the silent cases made correct and the false warning gone are checked against
independent computations (the dense exact periodic GP, the order of ``add_adequacy``'s two results)."""
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from regression import assert_refused

import ppl_sparsegp as psg
from ppl_sparsegp import diagnostics
from ppl_sparsegp.approximations import MarginalGaussian
from ppl_sparsegp.features import (
    FourierFeatures,
    OutsideDomainWarning,
    SphericalHarmonicFeatures,
)
from ppl_sparsegp.features.spherical import spherical_statistics
from ppl_sparsegp.saving import load_fit, save_fit

jax.config.update("jax_enable_x64", True)

N = 20
x = np.linspace(0.0, 1.0, N)
y = np.sin(6 * x)
VFF = FourierFeatures(-1.0, 2.0, 8)
K = psg.Matern32(1.0, 0.3)
LOGNORMAL_ELL = psg.Matern32(1.0, dist.LogNormal(np.log(0.3), 0.3))
PERIODIC_BOX = FourierFeatures(0.0, 1.0, 5)


def run(model, *args, **kwargs):
    """The model's trace under a fixed seed (what MCMC's initialisation and Predictive do)."""
    return handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(*args, **kwargs)


def gp(*args, **kwargs):
    return lambda: run(lambda: psg.spectral_gp(*args, **kwargs))


def mgp(*args, **kwargs):
    return lambda: run(lambda: psg.marginal_spectral_gp(*args, **kwargs))


def in_plate(size, fn):
    def model():
        with numpyro.plate("out", size):
            fn()
    return lambda: run(model)


def twice(fn):
    def model():
        fn()
        fn()
    return lambda: run(model)


def substituted(model, values):
    return lambda: run(handlers.substitute(model, data=values))


def ell_model(x, y):
    ell = numpyro.sample("ell", dist.LogNormal(np.log(0.3), 0.3))
    psg.marginal_spectral_gp("y", (VFF, psg.Matern32(1.0, ell)), x, y, 0.1)


def refinement(samples, **kwargs):
    return lambda: diagnostics.refinement_check(ell_model, samples, x, y, refit=False, **kwargs)


GOOD_DRAWS = {"ell": jnp.linspace(0.25, 0.35, 4)}
H = np.stack([np.ones(N), x], 1)
REFINEMENT = {"k_hat": 0.1, "ess": 3.0, "shift_is": {"ell": 0.1}, "shift_refit": {}, "ok": True, "message": "ok"}


def _spherical():
    kernel = psg.ArcCosine(order=1, variance=1.0, lengthscale=1.0, bias=1.0)
    return SphericalHarmonicFeatures(2, 2, kernel=kernel), kernel


def _fourier_from_data(*args, **kwargs):
    return lambda: FourierFeatures.from_data(*args, **kwargs)


def _save_own(tmp, *args, **kwargs):
    return lambda: save_fit(str(tmp / "fit.npz"), *args, **kwargs)


# (id, call, exception, words the message must contain). Calls that need a folder take it as `tmp`.
CASES = [
    # --- spectral_gp ----------------------------------------------------------------------------
    ("spectral_gp/pair swapped", gp("f", K, VFF, x), TypeError, ["feature", "kernel", "swap"]),
    ("spectral_gp/feature not a feature", gp("f", "vff", K, x), TypeError, ["feature", "InducingFeature"]),
    ("spectral_gp/Normal lengthscale prior", gp("f", VFF, psg.Matern52(1.0, dist.Normal(0.5, 1.0)), x),
     ValueError, ["lengthscale", "positive", "LogNormal"]),
    ("spectral_gp/Periodic Normal lengthscale", gp("f", PERIODIC_BOX, psg.Periodic(1.0, dist.Normal(0.5, 1.0), 1.0), x),
     ValueError, ["lengthscale", "positive", "HalfNormal"]),
    ("spectral_gp/Normal variance prior", gp("f", VFF, psg.Matern32(dist.Normal(1.0, 1.0), 0.3), x),
     ValueError, ["variance", "positive"]),
    ("spectral_gp/sampled period on its box",
     gp("f", PERIODIC_BOX, psg.Periodic(1.0, 0.5, dist.LogNormal(0.0, 0.1)), x),
     ValueError, ["period", "fixed", "1"]),
    ("spectral_gp/2-D lengthscale prior, 1-D features",
     gp("f", VFF, psg.Matern32(1.0, dist.LogNormal(jnp.zeros(2), 0.3)), x), ValueError, ["lengthscale", "input"]),
    ("spectral_gp/negative lengthscale draw", substituted(lambda: psg.spectral_gp("f", VFF, LOGNORMAL_ELL, x),
                                                          {"f_kernel_lengthscale": -0.3}),
     ValueError, ["f_kernel_lengthscale", "positive"]),
    ("spectral_gp/two calls with one name", twice(lambda: psg.spectral_gp("f", VFF, K, x)),
     ValueError, ["name", "'f'"]),
    ("spectral_gp/template sampled per output in a plate",
     in_plate(3, lambda: psg.spectral_gp("f", VFF, LOGNORMAL_ELL, x)),
     ValueError, ["plate", "batched_kernel"]),
    ("spectral_gp/outside a model", lambda: psg.spectral_gp("f", VFF, K, x), ValueError, ["seed"]),
    # --- marginal_spectral_gp -------------------------------------------------------------------
    ("marginal/y (N,) in a plate of 3", in_plate(3, lambda: psg.marginal_spectral_gp("y", (VFF, K), x, y, 0.1)),
     ValueError, ["y", "plate", "broadcast_to"]),
    ("marginal/noise array of the wrong shape", mgp("y", (VFF, K), x, y, jnp.full(5, 0.1)),
     ValueError, ["noise", "shape"]),
    ("marginal/Normal noise prior", mgp("y", (VFF, K), x, y, dist.Normal(0.1, 1.0)),
     ValueError, ["noise", "positive", "Gamma"]),
    ("marginal/Normal lengthscale prior", mgp("y", (VFF, psg.Matern52(1.0, dist.Normal(0.5, 1.0))), x, y, 0.1),
     ValueError, ["lengthscale", "positive"]),
    ("marginal/mean_prior of the wrong size", mgp("y", (VFF, K), x, y, 0.1, mean_basis=H,
                                                  mean_prior=dist.Normal(jnp.zeros(3), 1.0)),
     ValueError, ["mean_prior", "2"]),
    ("marginal/mean_prior not Gaussian", mgp("y", (VFF, K), x, y, 0.1, mean_basis=H, mean_prior=dist.Cauchy(0.0, 1.0)),
     ValueError, ["mean_prior", "Normal"]),
    ("marginal/pair swapped", mgp("y", (K, VFF), x, y, 0.1), TypeError, ["gps", "(feature, kernel)", "swap"]),
    ("marginal/GP named like the observed site", mgp("y", {"y": (VFF, K)}, x, y, 0.1), ValueError, ["'y'", "name"]),
    ("marginal/two calls with one name", twice(lambda: psg.marginal_spectral_gp("y", (VFF, K), x, y, 0.1)),
     ValueError, ["name", "'y'"]),
    ("marginal/template sampled per output in a plate",
     in_plate(2, lambda: psg.marginal_spectral_gp("y", (VFF, LOGNORMAL_ELL), x, np.stack([y, y]), 0.1)),
     ValueError, ["plate", "shared", "outside"]),
    ("marginal/2-D lengthscale prior, 1-D features",
     mgp("y", (VFF, psg.Matern32(1.0, dist.LogNormal(jnp.zeros(2), 0.3))), x, y, 0.1),
     ValueError, ["lengthscale", "input"]),
    ("marginal/sampled period on its box",
     mgp("y", (PERIODIC_BOX, psg.Periodic(1.0, 0.5, dist.LogNormal(0.0, 0.1))), x, y, 0.1),
     ValueError, ["period", "fixed"]),
    ("marginal/y of the wrong length", mgp("y", (VFF, K), x, y[:5], 0.1), ValueError, ["y", "20"]),
    # --- MarginalGaussian -----------------------------------------------------------------------
    ("MarginalGaussian/no parts", lambda: MarginalGaussian([], 0.01), ValueError, ["parts", "marginal_spectral_gp"]),
    # --- refinement_check -----------------------------------------------------------------------
    ("refinement_check/site missing from samples", refinement({"other": jnp.ones(4)}), ValueError, ["samples", "ell"]),
    ("refinement_check/one draw", refinement({"ell": jnp.ones(1) * 0.3}), ValueError, ["samples", "draws", "2"]),
    ("refinement_check/ragged draws", refinement({"ell": jnp.ones(4) * 0.3, "other": jnp.ones(3)}),
     ValueError, ["samples", "draws", "ell"]),
    ("refinement_check/max_draws=0", refinement(GOOD_DRAWS, max_draws=0), ValueError, ["max_draws"]),
    ("refinement_check/threshold 0", refinement(GOOD_DRAWS, threshold=0.0), ValueError, ["threshold"]),
    # --- add_adequacy ---------------------------------------------------------------------------
    ("add_adequacy/None", lambda: diagnostics.add_adequacy(az.InferenceData(), None), TypeError,
     ["result", "adequacy", "refinement_check"]),
    ("add_adequacy/partial refinement dict", lambda: diagnostics.add_adequacy(az.InferenceData(), {"k_hat": 0.1}),
     ValueError, ["result", "shift_is", "refinement_check"]),
    ("add_adequacy/partial adequacy dict",
     lambda: diagnostics.add_adequacy(az.InferenceData(), {"residual_fraction": np.ones(3)}),
     ValueError, ["result", "median", "adequacy"]),
    # --- from_mcmc ------------------------------------------------------------------------------
    ("from_mcmc/gp neither approximation nor model", lambda: diagnostics.from_mcmc(object(), 3), TypeError, ["gp"]),
    ("from_mcmc/draws instead of the MCMC object", lambda: diagnostics.from_mcmc(GOOD_DRAWS, ell_model),
     TypeError, ["mcmc", "from_samples"]),
    # --- the size rules -------------------------------------------------------------------------
    ("from_data/two lengthscales", _fourier_from_data(x, psg.Matern32(1.0, [0.2, 0.4])), ValueError,
     ["lengthscale", "scalar"]),
    ("from_data/absurd M", _fourier_from_data(x, psg.Matern12(1.0, 0.05), tolerance=1e-9), ValueError,
     ["tolerance", "frequencies", "memory", "FourierFeatures(a, b"]),
    ("from_data/tolerance 0", _fourier_from_data(x, psg.Matern32(1.0, 0.1), tolerance=0.0), ValueError, ["tolerance"]),
    ("from_data/a kernel without ν", _fourier_from_data(x, psg.SquaredExponential(1.0, 0.1)), ValueError,
     ["kernel", "Matern32", "SquaredExponential"]),
    # --- spherical features ---------------------------------------------------------------------
    ("SphericalHarmonicFeatures.from_data/one column",
     lambda: SphericalHarmonicFeatures.from_data(x[:, None], psg.ArcCosine(order=1)), ValueError,
     ["X", "column", "2"]),
    ("spherical_statistics/zero rows", lambda: spherical_statistics(*_spherical(), np.zeros((0, 2)), np.zeros(0)),
     ValueError, ["X", "rows"]),
    ("spherical_statistics/y of the wrong length",
     lambda: spherical_statistics(*_spherical(), np.ones((4, 2)), np.ones(3)),
     ValueError, ["y", "4"]),
    # --- templates ------------------------------------------------------------------------------
    ("CollapsedGP/Normal lengthscale prior", lambda: psg.CollapsedGP(VFF, psg.Matern52(1.0, dist.Normal(0.5, 1.0))),
     ValueError, ["lengthscale", "positive", "LogNormal"]),
    ("ArcCosine/Normal variance prior in spectral_gp",
     lambda: run(lambda: psg.spectral_gp("f", _spherical()[0], psg.ArcCosine(order=1, variance=dist.Normal(1.0, 1.0)),
                                         np.ones((3, 2)))),
     ValueError, ["variance", "positive"]),
    ("ChordalMatern/Normal chordal lengthscale in marginal",
     lambda: run(lambda: psg.marginal_spectral_gp(
         "y", (_spherical()[0], psg.ChordalMatern(chordal_lengthscale=dist.Normal(0.5, 1.0))), np.ones((3, 2)),
         np.zeros(3), 0.1)),
     ValueError, ["chordal_lengthscale", "positive"]),
    ("Periodic/negative period", lambda: psg.Periodic(1.0, 0.5, -1.0), ValueError, ["period", "positive"]),
    # --- save_fit / load_fit --------------------------------------------------------------------
    ("save_fit/own model, samples not a dict", lambda tmp: _save_own(tmp, ell_model, [1.0])(), TypeError,
     ["samples", "get_samples"]),
    ("save_fit/own model, ragged samples", lambda tmp: _save_own(tmp, ell_model, {"a": np.ones(3), "b": np.ones(2)})(),
     ValueError, ["samples", "draws"]),
    ("save_fit/own model, model_args not a dict", lambda tmp: _save_own(tmp, ell_model, GOOD_DRAWS, model_args=[x])(),
     TypeError, ["model_args", "dict"]),
    ("save_fit/an approximation's .model", lambda tmp: _save_own(tmp, psg.SparseGP(VFF, K).model, GOOD_DRAWS)(),
     TypeError, ["gp", "itself"]),
    ("save_fit/neither", lambda tmp: _save_own(tmp, 3, GOOD_DRAWS)(), TypeError, ["gp", "model function"]),
    ("load_fit/no file", lambda tmp: load_fit(str(tmp / "none.npz")), FileNotFoundError, ["none.npz"]),
]


@pytest.mark.parametrize("call, exception, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_naming_the_argument(call, exception, words, tmp_path):
    assert_refused(call, exception, words, tmp_path, ignore=OutsideDomainWarning)


def test_every_entry_point_of_the_own_model_api_is_in_the_table():
    """New entry points join the table: each public name of the own-model API has at least one row."""
    entries = {c[0].split("/")[0] for c in CASES}
    required = {"spectral_gp", "marginal", "MarginalGaussian", "refinement_check", "add_adequacy", "from_mcmc",
                "from_data", "SphericalHarmonicFeatures.from_data", "spherical_statistics", "CollapsedGP",
                "ArcCosine", "ChordalMatern", "Periodic", "save_fit", "load_fit"}
    assert required <= entries, sorted(required - entries)


# --- the silent cases, made correct or refused, against independent computations ------------------
def test_mean_prior_expanded_to_an_event_is_accepted_and_equals_the_batched_normal():
    """``dist.Normal(0, 1).expand([2]).to_event(1)`` is the same prior as ``dist.Normal(zeros(2), 1)``:
    the same density of y (it was refused as "got Independent")."""
    def site(prior):
        return run(lambda: psg.marginal_spectral_gp("y", (VFF, K), x, y, 0.1, mean_basis=H, mean_prior=prior))["y"]

    a = site(dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    b = site(dist.Normal(jnp.zeros(2), 1.0))
    np.testing.assert_allclose(float(a["fn"].log_prob(y)), float(b["fn"].log_prob(y)), rtol=1e-13)


def test_outputs_in_a_plate_take_y_broadcast_when_asked():
    """y of shape (N,) in a plate of 3 is refused (table); broadcast by the user, each output's density is
    the single-output density (three independent copies), not one density counted three times silently."""
    single = float(run(lambda: psg.marginal_spectral_gp("y", (VFF, K), x, y, 0.1))["y"]["fn"].log_prob(y))

    def model():
        with numpyro.plate("out", 3):
            psg.marginal_spectral_gp("y", (VFF, K), x, jnp.broadcast_to(y, (3, N)), 0.1)

    site = run(model)["y"]
    np.testing.assert_allclose(np.asarray(site["fn"].log_prob(site["value"])), np.full(3, single), rtol=1e-12)


def test_add_adequacy_keeps_both_results_in_either_order():
    """refinement-then-residual (the order of the own-model guide) keeps the ``adequacy`` group, with the
    same content as residual-then-refinement."""
    residual = {"residual_fraction": np.array([0.01, 0.02, 0.03]), "median": 0.02, "q95": 0.03, "ok": True,
                "message": "adequate"}
    groups = []
    for first, second in ((REFINEMENT, residual), (residual, REFINEMENT)):
        idata = az.from_dict(posterior={"ell": np.ones((1, 3))})
        groups.append(diagnostics.add_adequacy(diagnostics.add_adequacy(idata, first), second).adequacy)
    for g in groups:
        assert g.attrs["refinement_k_hat"] == 0.1 and g.attrs["median"] == 0.02 and g.attrs["refinement_ok"] == 1
        np.testing.assert_array_equal(g["residual_fraction"].values, residual["residual_fraction"])
    assert groups[0].attrs == {k: groups[1].attrs[k] for k in groups[0].attrs} and len(groups[0].attrs) == 8
    alone = diagnostics.add_adequacy(az.from_dict(posterior={"ell": np.ones((1, 3))}), REFINEMENT)
    assert "adequacy" in alone.groups() and alone.adequacy.attrs["refinement_max_shift"] == 0.1


def test_periodic_features_extend_periodically_outside_their_box_without_a_warning():
    """A periodic kernel on FourierFeatures(0, 1, M): X_new outside [0, 1] raises no OutsideDomainWarning,
    the draws there repeat those one period away (the basis is periodic), and their mean over draws is the
    exact periodic GP's conditional mean (dense, R&W eq. 2.25) within Monte Carlo error."""
    kernel, s = psg.Periodic(1.0, 0.6, 1.0), 0.1
    inside = np.array([0.1, 0.45, 0.8])
    x_new = np.concatenate([inside - 1.0, inside + 1.0, inside + 2.5])  # outside [0, 1]

    def model(x_new):
        return psg.marginal_spectral_gp("y", {"g": (FourierFeatures(0.0, 1.0, 15), kernel)}, x, y, s, X_new=x_new)

    with warnings.catch_warnings():
        warnings.simplefilter("error", OutsideDomainWarning)
        draws = numpyro.infer.Predictive(model, num_samples=3000)(jax.random.PRNGKey(2),
                                                                  np.concatenate([inside, x_new]))
    g = np.asarray(draws["g_new"])
    for shift in (1, 2):  # -1, +1 period: the same values as inside the box (same draw of the weights)
        np.testing.assert_allclose(g[:, 3 * shift:3 * shift + 3], g[:, :3], rtol=1e-9, atol=1e-10)
    Kxx = np.asarray(kernel(x[:, None], x[:, None])) + s**2 * np.eye(N)
    Knx = np.asarray(kernel(x_new[:, None], x[:, None]))
    mean = Knx @ np.linalg.solve(Kxx, y)
    var = np.asarray(kernel.diag(x_new[:, None])) - np.sum(Knx * np.linalg.solve(Kxx, Knx.T).T, axis=1)
    z = (g[:, 3:].mean(0) - mean) / np.sqrt(var / g.shape[0])
    assert np.max(np.abs(z)) < 4.5, z  # Monte Carlo error of 3000 draws (Q_ff − K_ff at M = 15: 1.6e-11)
