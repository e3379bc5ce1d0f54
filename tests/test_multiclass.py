"""Multiclass likelihoods against closed forms / Monte Carlo / quadrature; SparseGP against dense."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import SVI, TraceMeanField_ELBO
from numpyro import optim
from scipy.special import logsumexp as np_logsumexp
from scipy.special import softmax as np_softmax
from scipy.stats import norm

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.variational import block_diagonal_covariance
from ppl_sparsegp.features.harmonic import HarmonicFeatures
from ppl_sparsegp.groups import Negation
from ppl_sparsegp import SparseGP
from ppl_sparsegp.likelihoods import RobustMax, Softmax

RNG = np.random.default_rng(0)


def test_robustmax_two_classes_matches_the_closed_form():
    """C = 2: P(f₁ > f₀) = Φ((m₁ − m₀)/√(v₀ + v₁)) exactly; the 20-node Gauss–Hermite rule on the smooth
    integrand N(x|m₁,v₁)Φ((x−m₀)/√v₀) (variance ratios ≤ 4 here) is accurate to ~1e-6 (7e-7 seen)."""
    mean = RNG.normal(size=(50, 2))
    var = RNG.uniform(0.4, 1.6, size=(50, 2))
    y = RNG.integers(0, 2, 50)
    lik = RobustMax(2, epsilon=0.01)
    P = jax.jit(lik.argmax_probability)(y, mean, var)
    sign = np.where(y == 1, 1.0, -1.0)
    ref = norm.cdf(sign * (mean[:, 1] - mean[:, 0]) / np.sqrt(var.sum(1)))
    np.testing.assert_allclose(P, ref, atol=2e-6)
    ve = jax.jit(lik.variational_expectation)(y, mean, var)
    np.testing.assert_allclose(ve, ref * np.log(0.99) + (1 - ref) * np.log(0.01), atol=2e-6 * 4.6)


def test_robustmax_against_monte_carlo():
    """C = 4: P_y, the class probabilities and log p(y) against 4·10⁵ NumPy draws (standard error
    ≤ 8e-4; tolerance 4e-3 = 5 standard errors). The 20-node Gauss–Hermite rule errs by up to ~2e-4 when
    the class variances differ tenfold (a sharp Φ factor), hence Σ_c p_c = 1 only to 1e-3."""
    C, eps = 4, 0.05
    mean = RNG.normal(size=(6, C))
    var = RNG.uniform(0.2, 2.0, size=(6, C))
    y = RNG.integers(0, C, 6)
    lik = RobustMax(C, epsilon=eps)
    f = mean + np.sqrt(var) * np.random.default_rng(1).normal(size=(4 * 10**5, 6, C))
    top = np.argmax(f, -1)
    P_mc = np.stack([(top == c).mean(0) for c in range(C)], -1)  # (6, C)
    probs = jax.jit(lik.class_probabilities)(mean, var)
    np.testing.assert_allclose(probs, P_mc * (1 - eps) + (1 - P_mc) * eps / (C - 1), atol=4e-3)
    np.testing.assert_allclose(np.sum(probs, -1), 1.0, atol=1e-3)
    Py = P_mc[np.arange(6), y]
    np.testing.assert_allclose(jax.jit(lik.variational_expectation)(y, mean, var),
                               Py * np.log1p(-eps) + (1 - Py) * np.log(eps / (C - 1)), atol=4e-3 * 4.2)
    np.testing.assert_allclose(jax.jit(lik.predict_log_density)(y, mean, var),
                               np.log(probs[np.arange(6), y]), rtol=1e-12)


def test_softmax_against_tensor_product_quadrature():
    """C = 3: E log softmax_y(f) and E softmax(f) against a 24³-node tensor-product Gauss–Hermite rule
    (exact to ~1e-8 for these smooth integrands); the Monte Carlo estimate with S = 20000 fixed draws has
    standard error ≲ 4e-3 here, tolerance 1.5e-2; its mean over fresh keys is unbiased (tolerance 4 s.e.)."""
    C = 3
    mean = RNG.normal(size=(4, C))
    var = RNG.uniform(0.2, 1.5, size=(4, C))
    y = np.array([0, 1, 2, 1])
    x, w = np.polynomial.hermite.hermgauss(24)
    grid = np.stack(np.meshgrid(x, x, x, indexing="ij"), -1).reshape(-1, C)
    wg = np.prod(np.stack(np.meshgrid(w, w, w, indexing="ij"), -1).reshape(-1, C), 1) / np.pi ** 1.5
    f = mean[:, None, :] + np.sqrt(2 * var)[:, None, :] * grid[None]  # (4, 24³, C)
    logp = f[np.arange(4), :, y] - np_logsumexp(f, axis=-1)
    ve_ref = logp @ wg
    probs_ref = np.einsum("k,nkc->nc", wg, np_softmax(f, axis=-1))
    lik = Softmax(C, num_samples=20000)
    np.testing.assert_allclose(jax.jit(lik.variational_expectation)(y, mean, var), ve_ref, atol=1.5e-2)
    np.testing.assert_allclose(jax.jit(lik.class_probabilities)(mean, var), probs_ref, atol=1.5e-2)
    small = Softmax(C, num_samples=4)
    keys = jax.random.split(jax.random.PRNGKey(1), 4000)
    draws = jax.jit(jax.vmap(lambda k: small.variational_expectation(y, mean, var, key=k)))(keys)
    se = np.asarray(draws.std(0)) / np.sqrt(len(keys))
    assert np.all(np.abs(np.asarray(draws.mean(0)) - ve_ref) < 4 * se)


def test_labels_and_arguments_are_validated():
    lik = RobustMax(3)
    with pytest.raises(ValueError, match="0..2"):
        lik.validate(np.array([0, 3]))
    with pytest.raises(ValueError, match="0..2"):
        lik.validate(np.array([0.5, 1]))
    with pytest.raises(ValueError, match="num_classes"):
        Softmax(1)
    with pytest.raises(ValueError, match="epsilon"):
        RobustMax(3, epsilon=1.5)
    with pytest.raises(ValueError, match="multiclass likelihood"):
        SparseGP(psg.InducingPoints(np.zeros((2, 1))), psg.Matern32(), psg.likelihoods.Bernoulli(), num_latent_gps=3)


KERNEL = psg.SquaredExponential(variance=1.5, lengthscale=0.8)
X = RNG.normal(size=(25, 2))
Y = RNG.integers(0, 3, 25)


def random_q(rng, C, sizes, scale=0.4):
    """Per class: a loc and a list of lower-triangular blocks."""
    out = []
    for _ in range(C):
        blocks = []
        for n in sizes:
            L = np.tril(rng.normal(size=(n, n))) * scale
            L[np.arange(n), np.arange(n)] = np.abs(L[np.arange(n), np.arange(n)]) + 0.3
            blocks.append(L)
        out.append((rng.normal(size=sum(sizes)) * 0.5, blocks))
    return out


def dense_kl(mu, S, P):
    Pinv = np.linalg.inv(P)
    return 0.5 * (np.trace(Pinv @ S) + mu @ Pinv @ mu - len(mu) + np.linalg.slogdet(P)[1] - np.linalg.slogdet(S)[1])


CASES = {
    "points-whitened": (psg.InducingPoints(X[:5]), "full", True, (5,)),
    "points-centred": (psg.InducingPoints(X[:5]), "full", False, (5,)),
    "harmonic-centred": (HarmonicFeatures(Negation(), X[:3]), block_diagonal_covariance, False, (3, 3)),
    "harmonic-whitened": (HarmonicFeatures(Negation(), X[:3]), block_diagonal_covariance, True, (3, 3)),
}


def setup(case, C=3):
    feature, q_cov, whiten, sizes = CASES[case]
    gp = SparseGP(feature, KERNEL, RobustMax(C, epsilon=0.02), whiten=whiten, q_cov=q_cov)
    qs = random_q(np.random.default_rng(2), C, sizes)
    params = {}
    for c, (mu, blocks) in enumerate(qs):
        params[f"{gp.site}_{c}_loc"] = mu
        params[f"{gp.site}_{c}_scale_tril"] = blocks[0] if len(blocks) == 1 else np.stack(blocks)
    Kuu, Kuf = jax.jit(lambda f: (psg.Kuu(f, KERNEL).to_dense(), psg.Kuf(f, KERNEL, X)))(feature)
    Kuu, Kuf = np.asarray(Kuu), np.asarray(Kuf)
    Ls = [np.asarray(jax.scipy.linalg.block_diag(*blocks)) for _, blocks in qs]
    return gp, params, qs, Ls, Kuu, Kuf, whiten


def dense_marginals(qs, Ls, Kuu, Kuf, whiten):
    """q(f_c(X)) per class from dense matrices (notes §1 predictive, per latent)."""
    R = np.linalg.cholesky(Kuu)
    A = np.linalg.solve(Kuu, Kuf)
    means, varis = [], []
    for (mu, _), L in zip(qs, Ls):
        S = L @ L.T
        mu_u, S_u = (R @ mu, R @ S @ R.T) if whiten else (mu, S)
        means.append(A.T @ mu_u)
        varis.append(1.5 - np.sum(Kuf * A, 0) + np.sum(A * (S_u @ A), 0))
    return np.stack(means, 1), np.stack(varis, 1)


@pytest.mark.parametrize("case", list(CASES))
def test_elbo_and_predict_against_dense(case):
    """ELBO = Σ_n E_q log p(y_n|f_n) − Σ_c KL(q(u_c)‖p(u_c)), q(f_c) and the predictive, densely."""
    gp, params, qs, Ls, Kuu, Kuf, whiten = setup(case)
    mean, var = dense_marginals(qs, Ls, Kuu, Kuf, whiten)
    prior = np.eye(len(Kuu)) if whiten else Kuu
    kl = sum(dense_kl(mu, L @ L.T, prior) for (mu, _), L in zip(qs, Ls))
    lik = RobustMax(3, epsilon=0.02)
    ref = float(np.sum(lik.variational_expectation(Y, mean, var))) - kl
    elbo, pred = jax.jit(lambda p: (gp.elbo(p, X, Y), gp.predict(X, params=p)))(params)
    np.testing.assert_allclose(elbo, ref, rtol=1e-9)
    np.testing.assert_allclose(pred["f_mean"], mean, atol=1e-10)
    np.testing.assert_allclose(pred["f_var"], var, atol=1e-10)
    np.testing.assert_allclose(pred["y_mean"], lik.class_probabilities(mean, var), atol=1e-10)


def test_svi_objective_is_unbiased_for_the_elbo():
    """TraceMeanField_ELBO (u ~ q for all classes in one site, minibatch of 6, KL analytic over the
    class blocks) averages to −ELBO (tolerance 4 standard errors)."""
    gp, params, *_ = setup("harmonic-centred")
    params = {k: jnp.asarray(v) for k, v in params.items()}
    keys = jax.random.split(jax.random.PRNGKey(0), 1000)
    loss = TraceMeanField_ELBO()
    losses = jax.jit(jax.vmap(lambda k: loss.loss(k, params, gp.model, gp.guide, X, Y, batch_size=6)))(keys)
    exact = -float(jax.jit(lambda p: gp.elbo(p, X, Y))(params))
    se = float(jnp.std(losses)) / np.sqrt(len(keys))
    assert abs(float(jnp.mean(losses)) - exact) < 4 * se


def test_predict_from_samples_mixes_the_per_draw_conditionals():
    gp, params, qs, Ls, Kuu, Kuf, whiten = setup("points-whitened")
    draws = np.random.default_rng(4).normal(size=(2, 3 * 5))
    out = jax.jit(lambda s: gp.predict(X, samples=s))({gp.site: draws})
    A = np.linalg.solve(np.linalg.cholesky(Kuu), Kuf)  # whitened: f | v has mean Aᵀ v
    means = np.stack([A.T @ d.reshape(3, 5).T for d in draws])  # (2, N, C)
    np.testing.assert_allclose(out["f_mean"], means.mean(0), atol=1e-10)
    np.testing.assert_allclose(out["f_mean_draws"], means, atol=1e-10)
    np.testing.assert_allclose(np.sum(out["y_mean"], -1), 1.0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("likelihood", [RobustMax(3), Softmax(3, num_samples=16)], ids=["robustmax", "softmax"])
def test_svi_learns_a_three_class_problem(likelihood):
    """End to end with harmonic features: three angular sectors of the plane are separable, so the
    fitted classifier is accurate (> 90 %) and its ELBO improves on the prior's."""
    rng = np.random.default_rng(5)
    Xc = rng.normal(size=(240, 2))
    yc = ((np.arctan2(Xc[:, 1], Xc[:, 0]) + np.pi) // (2 * np.pi / 3)).astype(int) % 3
    gp = SparseGP(HarmonicFeatures(Negation(), psg.Param(Xc[:8])), psg.SquaredExponential(1.0, 1.0),
                            likelihood, q_cov=block_diagonal_covariance)
    svi = SVI(gp.model, gp.guide, optim.Adam(0.03), TraceMeanField_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 400, Xc, yc, batch_size=120, progress_bar=False)
    probs = jax.jit(lambda p: gp.predict(Xc, params=p)["y_mean"])(result.params)
    assert np.mean(np.argmax(probs, 1) == yc) > 0.9
    assert result.losses[-20:].mean() < result.losses[:20].mean()
