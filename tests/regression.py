"""Small shared problems for the approximation tests (imported as ``from regression import ...``;
``tests/`` is on the path through conftest)."""
import inspect
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import ppl_sparsegp as psg

NOISE = 0.05
KERNEL = psg.Matern52(variance=1.2, lengthscale=0.3)


def data(n=30, seed=0):
    """Sorted inputs on [0, 1] and a noisy sine."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 1, n))[:, None]
    y = np.sin(6 * X[:, 0]) + 0.2 * rng.normal(size=n)
    return jnp.asarray(X), jnp.asarray(y)


def dense_posterior(X, y, Xs, kernel=KERNEL, noise=NOISE):
    """The exact GP's posterior mean and variance at Xs, by dense solves."""
    K = np.asarray(kernel(X)) + noise * np.eye(len(X))
    Ks, Kss = np.asarray(kernel(Xs, X)), np.asarray(kernel(Xs))
    mean = Ks @ np.linalg.solve(K, np.asarray(y))
    cov = Kss - Ks @ np.linalg.solve(K, Ks.T)
    return mean, np.diag(cov)


def assert_draws_match_conditional(draws, sites, y, m, C, S):
    """Predictive draws at new inputs against the dense Gaussian conditional given y ~ N(m, C): for each
    ``(site, cross, prior, mean0)`` (cross = Cov(f_new, y), prior = Cov(f_new)), the draws' mean within
    4.5 Monte Carlo sd of ``mean0 + cross C⁻¹ (y − m)`` and their sample covariance within 0.1·max variance
    (≈ 5 standard errors of S draws) of ``prior − cross C⁻¹ crossᵀ``."""
    for site, cross, prior, mean0 in sites:
        mean = mean0 + cross @ np.linalg.solve(C, y - m)
        cov = prior - cross @ np.linalg.solve(C, cross.T)
        got = np.asarray(draws[site])
        z = (got.mean(0) - mean) / np.sqrt(np.diag(cov) / S)
        assert np.max(np.abs(z)) < 4.5, (site, z)
        np.testing.assert_allclose(np.cov(got.T), cov, atol=0.1 * np.max(np.diag(cov)))


def trend_series(n=40, seed=0):
    """The marginal tests' series: x (n,) sorted on [0, 3], the linear mean's basis H (n, 2) and
    y = sin 3x + 0.3x + N(0, 0.1²) noise (shared so the sparse and exact marginals see the same data)."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 3.0, n))
    return x, np.stack([np.ones(n), x], 1), np.sin(3 * x) + 0.3 * x + 0.1 * rng.normal(size=n)


def assert_refused(call, exception, words, tmp_path, ignore=UserWarning):
    """One row of a bad-input table: ``call()`` (or ``call(tmp_path)`` when it takes an argument) raises
    ``exception`` whose message holds every one of ``words``; warnings of the category ``ignore`` are not
    the subject of the row."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ignore)
        with pytest.raises(exception) as info:
            call(tmp_path) if inspect.signature(call).parameters else call()
    message = str(info.value)
    missing = [w for w in words if w not in message]
    assert not missing, f"the message lacks {missing}: {message!r}"
