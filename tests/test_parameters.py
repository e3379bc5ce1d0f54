"""Templates (:mod:`ppl_sparsegp.parameters`): ``instantiate`` turns a number into a fixed value, a
distribution into a sample site and a :class:`Param` into a ``numpyro.param``, with the site names,
priors and constraints the docstrings give; its log density is the priors' (scipy); a Param is optimised
in the unconstrained space of its constraint; the point guide puts a Delta at ``<site>_map``, started at
the prior mean (or the transformed origin when the mean is not finite); ``free_sites`` lists the priors
and refuses a prior that can leave a positive field's domain."""
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro import handlers, optim
from numpyro.distributions import constraints
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.util import log_density
from scipy import special, stats

import ppl_sparsegp as psg
from ppl_sparsegp.parameters import Param, check_positive, free_sites, initial_value, instantiate

VARIANCE_PRIOR, LENGTHSCALE_PRIOR = dist.LogNormal(0.2, 0.5), dist.Gamma(2.0, 4.0)
# an additive kernel (a sequence of modules: prefix "<i>_") and a module nested in a field (prefix
# "<field>_"): a fixed value, a prior and a Param in each
TEMPLATE = psg.Additive([psg.Matern32(variance=VARIANCE_PRIOR, lengthscale=Param(0.3, constraints.positive)),
                         psg.SphereEmbedded(psg.Matern52(variance=1.5, lengthscale=LENGTHSCALE_PRIOR))])
SAMPLED = {"kernel_0_variance": VARIANCE_PRIOR, "kernel_1_base_lengthscale": LENGTHSCALE_PRIOR}


VALUES = {"kernel_0_variance": 0.9, "kernel_1_base_lengthscale": 0.2}


def trace(fn, values=None):
    """The sites of ``fn`` (sample sites at ``values``: no random draws to compile)."""
    return handlers.trace(handlers.seed(handlers.substitute(fn, data=values or {}), rng_seed=0)).get_trace()


def test_instantiate_adds_the_template_sites():
    out = {}
    tr = trace(lambda: out.setdefault("kernel", instantiate(TEMPLATE, "kernel_")), VALUES)
    assert set(tr) == set(SAMPLED) | {"kernel_0_lengthscale"}
    for name, prior in SAMPLED.items():
        assert tr[name]["type"] == "sample" and tr[name]["fn"] is prior
    assert tr["kernel_0_lengthscale"]["type"] == "param"
    assert tr["kernel_0_lengthscale"]["kwargs"]["constraint"] is constraints.positive
    np.testing.assert_allclose(tr["kernel_0_lengthscale"]["value"], 0.3)
    # the concrete kernel holds the sites' values and the fixed number
    k = out["kernel"]
    assert isinstance(k, psg.Additive) and isinstance(k.kernels[1], psg.SphereEmbedded)
    values = [k.kernels[0].variance, k.kernels[0].lengthscale, k.kernels[1].base.variance,
              k.kernels[1].base.lengthscale]
    np.testing.assert_allclose(np.array(values, dtype=float), [0.9, 0.3, 1.5, 0.2])


def test_log_density_is_the_priors():
    """A model that only instantiates the template: its log joint is the two priors' log densities."""
    lp, _ = log_density(lambda: instantiate(TEMPLATE, "kernel_"), (), {}, VALUES)
    ref = stats.lognorm(0.5, scale=np.exp(0.2)).logpdf(0.9) + stats.gamma(2.0, scale=1 / 4.0).logpdf(0.2)
    np.testing.assert_allclose(lp, ref, rtol=1e-12)


def test_param_is_optimised_in_its_unconstrained_space():
    """SVI keeps log(0.3) for a positive Param and logit(0.25) for one in (0, 1), and hands back the
    constrained values; an initial value outside the constraint is refused."""
    template = psg.Matern32(variance=Param(0.25, constraints.unit_interval),
                            lengthscale=Param(0.3, constraints.positive))

    def model():
        instantiate(template, "kernel_")

    svi = SVI(model, model, optim.Adam(0.1), Trace_ELBO())
    state = svi.init(np.zeros(2, np.uint32))
    raw = svi.optim.get_params(state.optim_state)
    np.testing.assert_allclose([raw["kernel_lengthscale"], raw["kernel_variance"]], [np.log(0.3), special.logit(0.25)],
                               rtol=1e-12)
    params = svi.get_params(state)
    np.testing.assert_allclose([params["kernel_lengthscale"], params["kernel_variance"]], [0.3, 0.25], rtol=1e-12)
    with pytest.raises(ValueError, match="violates its constraint"):
        Param(-1.0, constraints.positive)


def test_point_guide_puts_a_delta_at_the_map_param():
    """point=True: ``<site>_map`` params (constrained to the prior's support, started at the prior mean
    E = exp(μ + s²/2) for the LogNormal and a/b for the Gamma) and a Delta sample site at their value;
    Params stay params."""
    tr = trace(lambda: instantiate(TEMPLATE, "kernel_", point=True))
    for name, mean in [("kernel_0_variance", np.exp(0.2 + 0.5**2 / 2)), ("kernel_1_base_lengthscale", 0.5)]:
        param = tr[f"{name}_map"]
        assert param["type"] == "param" and param["kwargs"]["constraint"] == constraints.positive
        np.testing.assert_allclose(param["value"], mean, rtol=1e-12)
        assert tr[name]["type"] == "sample" and isinstance(tr[name]["fn"], dist.Delta)
        np.testing.assert_allclose(tr[name]["value"], mean, rtol=1e-12)
    assert tr["kernel_0_lengthscale"]["type"] == "param"
    # no finite prior mean: the transformed origin, biject_to(support)(0)
    np.testing.assert_allclose(initial_value(dist.HalfCauchy(1.0)), 1.0)  # exp(0)
    np.testing.assert_allclose(initial_value(dist.Cauchy(0.0, 1.0)), 0.0)
    np.testing.assert_allclose(initial_value(dist.Uniform(0.0, 4.0)), 2.0)


def test_free_sites_lists_the_priors_and_checks_their_support():
    assert free_sites(TEMPLATE, "kernel_") == SAMPLED
    per_dim = dist.LogNormal(np.zeros(2), 1.0).to_event(1)  # one lengthscale per input dimension
    assert free_sites(psg.Matern32(lengthscale=per_dim), "k_") == {"k_lengthscale": per_dim}
    with pytest.raises(ValueError, match=r"the prior for Matern32.lengthscale \(site 'kernel_1_base_lengthscale'\) "
                                         r"must have positive support, got Normal"):
        free_sites(psg.Additive([psg.Matern32(), psg.SphereEmbedded(psg.Matern32(lengthscale=dist.Normal(1.0, 0.1)))]),
                   "kernel_")
    with pytest.raises(ValueError, match="Matern32.variance must be positive and finite"):
        psg.Matern32(variance=-1.0)
    with pytest.raises(ValueError, match="noise must be positive and finite"):
        check_positive(np.array([1.0, np.inf]), "noise")


def test_modules_are_immutable():
    k = psg.Matern32(1.0, 0.5)
    with pytest.raises(AttributeError, match="immutable"):
        k.variance = 2.0
    with pytest.raises(TypeError, match="has no field 'period'"):
        k.replace(period=1.0)
    assert float(k.replace(variance=2.0).variance) == 2.0 and float(k.variance) == 1.0


def test_a_param_on_a_positive_field_is_positive_by_default_and_a_real_constraint_is_refused():
    """Param(init) without a constraint gets the field's domain: positive for a kernel's lengthscale
    (the numpyro.param site carries constraints.positive, so SVI cannot drive it negative), real for an
    unconstrained field (a mean); an explicit real constraint on a positive field is refused when the
    model is built, naming the site; a non-positive init of a positive field is refused too."""
    import numpyro
    from numpyro import handlers
    from numpyro.distributions import constraints

    import ppl_sparsegp as psg
    from ppl_sparsegp.parameters import instantiate

    gp = psg.SparseGP(psg.InducingPoints(psg.Param(np.zeros((3, 1)))), psg.Matern32(psg.Param(1.0), psg.Param(0.3)),
                      psg.Gaussian(psg.Param(0.1)))
    tr = handlers.trace(handlers.seed(gp.guide, 0)).get_trace(np.linspace(0, 1, 5)[:, None], np.zeros(5))
    for site in ("kernel_lengthscale", "kernel_variance", "likelihood_variance"):
        assert tr[site]["kwargs"]["constraint"] is constraints.positive
    assert tr["feature_Z"]["kwargs"]["constraint"] is constraints.real
    with pytest.raises(ValueError, match=r"site 'kernel_lengthscale' must be positive but its Param has the "
                                         r"constraint Real"):
        psg.SparseGP(psg.FourierFeatures(0, 1, 4), psg.Matern32(1.0, psg.Param(0.3, constraints.real)),
                     psg.Gaussian(0.1)).hyperparameter_sites()
    with pytest.raises(ValueError, match="violates its constraint"):
        with handlers.seed(rng_seed=0):
            instantiate(psg.Matern32(1.0, psg.Param(-0.3)))
    assert numpyro  # imported for the handlers' stack


def test_debug_checks_find_a_traced_negative_lengthscale_and_nan_inputs_under_jit_vmap_and_grad():
    """By default a traced bad value passes silently (a wrong number or NaN out); with ``debug_checks`` the same check
    as for concrete values runs when the program runs and raises the message naming the argument."""
    import jax
    import jax.numpy as jnp

    X = np.linspace(0.0, 1.0, 5)[:, None]

    def total(ell, X=X):
        return jnp.sum(psg.Matern32(1.0, ell)(X))

    bad_X = jnp.asarray(X).at[0, 0].set(jnp.nan)
    np.testing.assert_allclose(jax.jit(total)(-0.2), total(0.2))  # silently read as |ℓ| ...
    assert np.isnan(jax.jit(lambda X: total(0.2, X))(bad_X))  # ... and silently NaN
    with psg.debug_checks():
        with pytest.raises(Exception, match="Matern32.lengthscale must be positive and finite"):
            jax.block_until_ready(jax.jit(total)(-0.2))
        with pytest.raises(Exception, match="Matern32.lengthscale must be positive"):
            jax.vmap(total)(jnp.array([0.2, -0.2]))
        with pytest.raises(Exception, match="Matern32.lengthscale must be positive"):
            jax.grad(total)(-0.2)
        with pytest.raises(Exception, match="X contains NaN or inf"):
            jax.block_until_ready(jax.jit(lambda X: total(0.2, X))(bad_X))
        with pytest.raises(Exception, match="is not positive definite .Cholesky failed.; pass a larger jitter"):
            jax.block_until_ready(jax.jit(lambda m: psg.linalg.Dense(m).chol)(jnp.array([[1.0, 2.0], [2.0, 1.0]])))
        # a likelihood's own check, traced
        with pytest.raises(Exception, match="y: counts must be non-negative integers"):
            jax.block_until_ready(jax.jit(lambda y: psg.Poisson().validate(y))(jnp.array([1.0, -2.0])))
        np.testing.assert_allclose(jax.jit(total)(0.2), total(0.2))  # good values pass
    assert not psg.parameters._DEBUG["on"]  # the context restores the default
