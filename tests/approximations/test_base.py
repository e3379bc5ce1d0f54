"""The shared machinery of every approximation (:mod:`ppl_sparsegp.approximations.base`): bad data and
bad templates raise errors naming the argument, and ``predict``/``elbo``/``optimal_q`` refuse missing or
misspelt params and posterior draws (``_require_params``, ``_require_samples``) instead of substituting
initial values or prior draws."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density
from regression import KERNEL, NOISE, data, dense_posterior

import ppl_sparsegp as psg
from ppl_sparsegp.likelihoods import Gaussian, Poisson, RobustMax


def test_bad_inputs():
    X, y = data(10)
    gp = psg.SparseGP(psg.InducingPoints(X[::2]), KERNEL, Gaussian(NOISE))
    with pytest.raises(ValueError, match="10 rows but y has 9"):
        log_density(gp.model, (X, y[:9]), {}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="y must be None or an array of rank 1"):
        log_density(gp.model, (X, y[:, None]), {}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="NaN or inf"):
        log_density(gp.model, (X.at[0, 0].set(jnp.nan), y), {}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="batch_size"):
        log_density(gp.model, (X, y), {"batch_size": 0}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="q_cov"):
        psg.SparseGP(psg.InducingPoints(X), KERNEL, q_cov="kronecker-ish")
    with pytest.raises(ValueError, match="positive support"):
        psg.SparseGP(psg.InducingPoints(X), psg.Matern32(lengthscale=dist.Normal(0, 1)))
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        psg.CollapsedGP(psg.InducingPoints(X), KERNEL, Poisson())
    with pytest.raises(ValueError, match="noise_variance must be a finite number > 0"):
        psg.collapsed_elbo(psg.InducingPoints(X), KERNEL, X, y, -1.0)
    with pytest.raises(TypeError, match="feature must be an inducing feature"):
        psg.SparseGP(X, KERNEL)


def test_predict_and_elbo_refuse_missing_or_misspelt_params():
    """Issue 17 item 3: predict(params={}) used to return mean 0 and the prior variance (q(u) at its
    initial value, hyperparameters drawn from the prior with seed 0). Every param of the guide is now
    required; missing ones and keys that match nothing are named, eagerly and under jit."""
    X, y = data(12)
    gp = psg.SparseGP(psg.InducingPoints(X[::3]),
                      psg.Matern52(variance=psg.Param(1.0, dist.constraints.positive),
                                   lengthscale=dist.LogNormal(-1.0, 1.0)),
                      Gaussian(variance=dist.LogNormal(-2.0, 1.0)), mean=dist.Normal(0.0, 1.0))
    params = {"kernel_variance": 1.3, "kernel_lengthscale_map": 0.25, "likelihood_variance_map": 0.05,
              "mean_map": 0.1, "f_v_loc": 0.3 * jnp.ones(4), "f_v_scale_tril": 0.5 * jnp.eye(4)}
    full = gp.predict(X, params=params)
    # the point values (site names instead of <site>_map) are accepted and mean the same
    np.testing.assert_allclose(gp.predict(X, params=gp.point_values(params))["f_mean"], full["f_mean"])
    with pytest.raises(ValueError, match=r"predict: params is missing 'kernel_variance', 'kernel_lengthscale_map'"
                                         r", 'likelihood_variance_map', 'mean_map', 'f_v_loc', 'f_v_scale_tril' "
                                         r"\(pass svi_result.params from SVI on this model's guide\)"):
        gp.predict(X, params={})
    without_q = {k: v for k, v in params.items() if k != "f_v_scale_tril"}
    with pytest.raises(ValueError, match=r"is missing 'f_v_scale_tril' \(pass"):
        jax.jit(lambda p: gp.predict(X, params=p))(without_q)
    typo = dict(without_q, f_v_scale_trill=params["f_v_scale_tril"])
    with pytest.raises(ValueError, match="elbo: params is missing 'f_v_scale_tril'; it has unexpected "
                                         "'f_v_scale_trill'"):
        gp.elbo(typo, X, y)
    # a complete dict with an extra key is fine (and the extra key changes nothing)
    np.testing.assert_array_equal(gp.predict(X, params=dict(params, loss=0.0))["f_var"], full["f_var"])


def test_predict_refuses_missing_sample_sites_and_collapsed_params():
    """samples= must hold every sampled site (no silent prior draws); CollapsedGP's params and
    optimal_q's values likewise."""
    X, y = data(12)
    kernel = psg.Matern52(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 1.0))
    gp = psg.SparseGP(psg.InducingPoints(X[::3]), kernel, Gaussian(NOISE))
    draws = {"kernel_variance": jnp.array([1.0, 1.5]), "kernel_lengthscale": jnp.array([0.2, 0.3]),
             "f_v": jnp.ones((2, 4))}
    out = gp.predict(X, samples=draws)
    assert out["f_mean_draws"].shape == (2, 12) and np.all(np.isfinite(out["f_var"]))
    with pytest.raises(ValueError, match=r"predict: samples is missing 'kernel_lengthscale'; it has unexpected "
                                         r"'kernel_lengthscale_map' \(pass mcmc.get_samples\(\)"):
        gp.predict(X, samples={"kernel_lengthscale_map" if k == "kernel_lengthscale" else k: v
                               for k, v in draws.items()})
    with pytest.raises(ValueError, match="samples is missing 'f_v'"):
        gp.predict(X, samples={k: v for k, v in draws.items() if k != "f_v"})

    collapsed = psg.CollapsedGP(psg.InducingPoints(X), kernel, Gaussian(dist.LogNormal(-2.0, 1.0)))
    with pytest.raises(ValueError, match="predict: params is missing 'kernel_lengthscale_map', "
                                         "'likelihood_variance_map'"):
        collapsed.with_data(X, y).predict(X, params={"kernel_variance_map": 1.2})
    point = {"kernel_variance_map": 1.2, "kernel_lengthscale_map": 0.3, "likelihood_variance_map": NOISE}
    mean, var = dense_posterior(X, y, X)  # Z = X: the exact GP at KERNEL's values
    pred = collapsed.with_data(X, y).predict(X, params=point)
    np.testing.assert_allclose(pred["f_mean"], mean, atol=1e-6)
    np.testing.assert_allclose(pred["f_var"], var, atol=1e-6)
    with pytest.raises(ValueError, match="samples is missing 'likelihood_variance'"):
        collapsed.with_data(X, y).predict(X, samples={k: v for k, v in draws.items() if k != "f_v"})
    with pytest.raises(ValueError, match="optimal_q: values is missing 'kernel_lengthscale'"):
        collapsed.optimal_q({"kernel_variance": 1.0, "likelihood_variance": NOISE}, X, y)


def test_multiclass_predict_refuses_missing_params_and_sites():
    """The same guard in SparseGP: one q per class, every class's params required."""
    X, _ = data(9)
    labels = jnp.arange(9) % 3
    gp = psg.SparseGP(psg.InducingPoints(X[::3]), psg.Matern52(lengthscale=dist.LogNormal(-1.0, 1.0)),
                      RobustMax(3), q_cov="diag")
    params = {"kernel_lengthscale_map": 0.3, **{f"f_v_{c}_loc": jnp.full(3, c - 1.0) for c in range(3)},
              **{f"f_v_{c}_scale": 0.5 * jnp.ones(3) for c in range(3)}}
    pred = jax.jit(lambda p: gp.predict(X, params=p))(params)
    assert np.all(np.argmax(pred["f_mean"], 1) == 2)  # class 2 has the largest q mean: params were used
    partial = {k: v for k, v in params.items() if k != "f_v_2_scale"}
    with pytest.raises(ValueError, match=r"predict: params is missing 'f_v_2_scale' \(pass svi_result"):
        gp.predict(X, params=partial)
    with pytest.raises(ValueError, match="elbo: params is missing 'f_v_2_scale'"):
        gp.elbo(partial, X, labels)
    with pytest.raises(ValueError, match="samples is missing 'kernel_lengthscale'"):
        gp.predict(X, samples={"f_v": jnp.zeros((2, 9))})
