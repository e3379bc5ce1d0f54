"""approximations/optimise: L-BFGS MAP of the hyperparameters against an independent optimisation of
the exact GP's log joint (dense NumPy marginal likelihood + scipy log priors) when Z = X, where the
collapsed bound is the exact marginal likelihood."""
import numpy as np
import numpyro.distributions as dist
import pytest
from regression import data
from scipy import optimize, stats

import ppl_sparsegp as psg


def test_map_equals_the_exact_gp_type_ii_map():
    X, y = data(25)
    gp = psg.CollapsedGP(psg.InducingPoints(X, jitter=0.0),
                         psg.Matern52(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 1.0)),
                         psg.Gaussian(variance=dist.LogNormal(-3.0, 1.0)))
    values, info = psg.map_lbfgs(gp.model, gp.hyperparameter_sites(), model_args=(X, y))
    assert info["success"]
    x, yy = np.asarray(X)[:, 0], np.asarray(y)

    def neg_log_joint(log_theta):
        s2, ell, noise = np.exp(log_theta)
        r = np.sqrt(5) * np.abs(x[:, None] - x[None]) / ell
        K = s2 * (1 + r + r**2 / 3) * np.exp(-r) + noise * np.eye(len(x))
        L = np.linalg.cholesky(K)
        a = np.linalg.solve(L, yy)
        lml = -0.5 * a @ a - np.log(np.diag(L)).sum() - 0.5 * len(x) * np.log(2 * np.pi)
        prior = (stats.lognorm.logpdf(s2, 1.0, scale=1.0) + stats.lognorm.logpdf(ell, 1.0, scale=np.exp(-1.0))
                 + stats.lognorm.logpdf(noise, 1.0, scale=np.exp(-3.0)))
        return -(lml + prior)

    ref = optimize.minimize(neg_log_joint, np.log([1.0, 0.3, 0.05]), method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
    got = np.log([values["kernel_variance"], values["kernel_lengthscale"], values["likelihood_variance"]])
    np.testing.assert_allclose(got, ref.x, atol=2e-4)
    np.testing.assert_allclose(info["neg_log_joint"], ref.fun, rtol=1e-6)


def test_a_start_outside_the_support_is_refused():
    X, y = data(10)
    gp = psg.CollapsedGP(psg.InducingPoints(X), psg.Matern52(variance=dist.LogNormal(0.0, 1.0)),
                         psg.Gaussian(0.1))
    with pytest.raises(ValueError, match="not finite at the start"):
        psg.map_lbfgs(gp.model, gp.hyperparameter_sites(), model_args=(X, y), init={"kernel_variance": np.inf})


def test_rng_key_takes_a_key_or_an_int():
    """``rng_key``: an int s is ``jax.random.PRNGKey(s)`` (the same draws), anything else is refused by name."""
    import jax

    from ppl_sparsegp.approximations.map_estimate import prior_medians

    sites = {"a": dist.LogNormal(0.0, 1.0), "b": dist.Normal(2.0, 3.0)}
    by_int, by_key = prior_medians(sites, 7), prior_medians(sites, jax.random.PRNGKey(7))
    other = prior_medians(sites, 8)
    assert all(float(by_int[k]) == float(by_key[k]) for k in sites)
    assert any(float(by_int[k]) != float(other[k]) for k in sites)
    with pytest.raises(TypeError, match=r"prior_medians: rng_key must be a PRNG key \(jax.random.PRNGKey\(seed\)\)"):
        prior_medians(sites, 1.5)
