"""Stein particle inference against independent computations: Gaussian and conjugate posteriors for
SVGD, SteinVI's own step for plain SVGD, Monte Carlo for Stein random features, the M-SRFR update
(eq. 26) written out by hand, the exact weight-space posterior for the M-SRFR mixture, and AdamW's
update rule written out."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.contrib.einstein import SteinVI
from numpyro.infer import SVI, Trace_ELBO
from numpyro.optim import SGD, Adagrad

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.spectrum import SparseSpectrumGP
from ppl_sparsegp.diagnostics import stein_diagnostics, stein_inference_data
from ppl_sparsegp.features.random_fourier import RandomFourierFeatures, sample_frequencies
from ppl_sparsegp.likelihoods import Gaussian
from ppl_sparsegp.stein import (
    AdamW,
    FrequencyBlockMatrix,
    FrequencyRBFKernel,
    FrequencySteinVI,
    cyclical_annealing,
    fit_msrfr,
    fit_stein,
    pairwise_median_sq,
    stein_frequencies,
    svgd,
)


def regression_data(n=30, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, d))
    y = np.sin(6 * X[:, 0]) + 0.5 * X[:, -1] + 0.1 * rng.normal(size=n)
    return jnp.asarray(X), jnp.asarray(y)


def test_frequency_block_matrix_closed_form_matches_its_generic_form():
    # the RBF block and divergence by matrix products against R² calls of κ and of jax.grad(κ)
    rng = np.random.default_rng(4)
    R, D = 5, 3
    x, y, h = rng.normal(size=R * D), rng.normal(size=R * D), rng.uniform(0.5, 2.0, D)
    base = lambda a, b: jnp.exp(-0.5 * jnp.sum((a - b) ** 2 / h))  # noqa: E731
    fast = FrequencyBlockMatrix(base, jnp.asarray(x), jnp.asarray(y), D, jnp.asarray(h))
    slow = FrequencyBlockMatrix(base, jnp.asarray(x), jnp.asarray(y), D)
    np.testing.assert_allclose(fast.block, slow.block, rtol=1e-12)
    np.testing.assert_allclose(fast.divergence(), slow.divergence(), rtol=1e-10, atol=1e-14)
    v = rng.normal(size=R * D)
    np.testing.assert_allclose(fast @ jnp.asarray(v), slow.to_dense() @ v, rtol=1e-10)


def test_pairwise_median_matches_numpy():
    for n in (7, 10, 33):
        P = np.random.default_rng(n).standard_t(3, size=(n, 3))
        ref = np.median((P[:, None] - P[None]) ** 2, axis=(0, 1))  # self-pairs included, as in the code
        np.testing.assert_allclose(pairwise_median_sq(P), ref, rtol=1e-10)


def test_cyclical_annealing_schedule():
    t = np.arange(10)
    np.testing.assert_allclose(cyclical_annealing(t, 10, 2, 0.5), np.sqrt((t % 5) / 5))
    np.testing.assert_allclose(cyclical_annealing(t, 10, 2, 0.0), 1.0)


def gaussian_model():
    numpyro.sample("x", dist.MultivariateNormal(jnp.array([1.0, -2.0]), jnp.array([[1.0, 0.6], [0.6, 0.5]])))


def point_guide(site, shape, scale=1.0):
    def guide(*args, **kwargs):
        loc = numpyro.param(f"{site}_map", lambda key: scale * jax.random.normal(key, shape))
        numpyro.sample(site, dist.Delta(loc, event_dim=len(shape)))
    return guide


@pytest.mark.slow  # a run to convergence; the same update is checked step for step by the next test
def test_svgd_reproduces_a_gaussian_target():
    res = fit_stein(gaussian_model, point_guide("x", (2,)), jax.random.PRNGKey(0), num_particles=100,
                    num_steps=1000, input_dim=2, particle_param="x_map", optim=Adagrad(0.5))
    x = np.asarray(res.particles["x"])
    # SVGD's fixed point with 100 particles: the mean is matched to sampling accuracy and the covariance
    # to a few per cent in 2-D (the RBF kernel shrinks it slightly): 0.05 and 12 % leave margin
    np.testing.assert_allclose(x.mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(np.cov(x.T), [[1.0, 0.6], [0.6, 0.5]], rtol=0.12, atol=0.05)


def test_plain_svgd_takes_steinvis_step():
    # one step from the same particles: svgd's vectorised force equals SteinVI's (point-mass guide,
    # FrequencyRBFKernel, loss temperature 1/P, repulsion α), read off an SGD(1) update
    P, alpha = 7, 0.6
    stein = FrequencySteinVI(gaussian_model, point_guide("x", (2,)), SGD(1.0), FrequencyRBFKernel(2),
                             num_stein_particles=P, loss_temperature=1.0 / P, repulsion_temperature=alpha)
    state = jax.jit(stein.init)(jax.random.PRNGKey(3))
    x0 = stein.get_params(state)["x_map"]
    new, force_norm = jax.jit(stein.update)(state)
    logp = dist.MultivariateNormal(jnp.array([1.0, -2.0]), jnp.array([[1.0, 0.6], [0.6, 0.5]])).log_prob
    x1, norms = svgd(logp, x0, num_steps=1, repulsion=alpha, optim=SGD(1.0))
    np.testing.assert_allclose(x1, stein.get_params(new)["x_map"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(norms[0], force_norm, rtol=1e-10)
    with pytest.raises(ValueError, match="P >= 2"):
        svgd(logp, jnp.zeros((1, 2)), num_steps=1)
    with pytest.raises(ValueError, match="num_steps"):
        svgd(logp, x0, num_steps=0)


@pytest.mark.slow  # a run to convergence of the update the test above checks step for step
def test_plain_svgd_reproduces_a_gaussian_target():
    """Run to convergence, plain ``svgd`` matches the target's moments (same tolerances as through SteinVI)."""
    logp = dist.MultivariateNormal(jnp.array([1.0, -2.0]), jnp.array([[1.0, 0.6], [0.6, 0.5]])).log_prob
    x, _ = svgd(logp, 2.0 * jax.random.normal(jax.random.PRNGKey(0), (100, 2)), num_steps=1000, optim=Adagrad(0.5))
    x = np.asarray(x)
    np.testing.assert_allclose(x.mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(np.cov(x.T), [[1.0, 0.6], [0.6, 0.5]], rtol=0.12, atol=0.05)


@pytest.mark.slow  # 3 × 500 SVGD steps; the M-SRFR update itself is checked by test_msrfr_step_is_eq_26_written_out
def test_stein_random_features_approximate_the_kernel_better_than_monte_carlo():
    # SRF for a known kernel [2, §5.1]: particles pushed towards N(0, I) give a Gram matrix closer to
    # the exact kernel's than i.i.d. draws (Figure 2 of [2]: about 5× at R = 50, d = 2)
    kernel = psg.SquaredExponential(1.0, 1.0)
    X = jax.random.uniform(jax.random.PRNGKey(9), (200, 2))
    K = kernel(X)
    def err(W):
        return float(jnp.linalg.norm(RandomFourierFeatures(W).gram(kernel, X) - K) / jnp.linalg.norm(K))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    W = [stein_frequencies(kernel, k, 50, 2, num_steps=500) for k in keys]
    mc = np.mean([err(sample_frequencies(kernel, k, 50, 2, "mc")) for k in keys])  # SVGD's starting draws
    assert np.mean([err(w) for w in W]) < 0.5 * mc
    np.testing.assert_allclose(np.concatenate(W).mean(0), 0.0, atol=0.1)
    np.testing.assert_allclose(np.cov(np.concatenate(W).T), np.eye(2), atol=0.15)
    with pytest.raises(ValueError, match="num_frequencies"):
        stein_frequencies(kernel, keys[0], 1, 2)


def test_steinvi_reproduces_a_conjugate_posterior():
    y = jnp.asarray(np.random.default_rng(1).normal(0.7, 1.0, 10))

    def model(y):
        theta = numpyro.sample("theta", dist.Normal(0.0, 2.0).expand((1,)).to_event(1))
        numpyro.sample("y", dist.Normal(theta, 1.0), obs=y)

    res = fit_stein(model, point_guide("theta", (1,), 2.0), jax.random.PRNGKey(1), y, num_particles=60,
                    num_steps=400, input_dim=1, particle_param="theta_map", optim=Adagrad(0.3))
    theta = np.asarray(res.particles["theta"])[:, 0]
    post_var = 1.0 / (1.0 / 4.0 + 10.0)
    post_mean = post_var * float(jnp.sum(y))
    # 60 particles in 1-D after 400 steps (measured: mean 1e-4 sd off, variance 0.1 % off; the same at
    # 1 500 steps): mean within 0.1 posterior sd, variance within 10 %
    assert abs(theta.mean() - post_mean) < 0.1 * math.sqrt(post_var)
    assert abs(theta.var() / post_var - 1.0) < 0.1


def tiny_msrfr(alpha=0.7, M=3, R=2):
    X, y = regression_data(10, 2)
    kernel = psg.SquaredExponential(variance=1.0, lengthscale=jnp.array([0.5, 0.8]))
    prior = dist.Normal(0.0, 3.0).expand((R, 2)).to_event(2)
    gp = SparseSpectrumGP(kernel, Gaussian(0.05), frequencies=prior)
    make = lambda cls: cls(gp.model, gp.particle_guide, SGD(1.0), FrequencyRBFKernel(2),  # noqa: E731
                           num_stein_particles=M, num_elbo_particles=1, loss_temperature=1.0 / M,
                           repulsion_temperature=alpha)
    return gp, X, y, make


def test_msrfr_step_is_eq_26_written_out():
    alpha, M, R = 0.7, 3, 2
    gp, X, y, make = tiny_msrfr(alpha, M, R)
    stein = make(FrequencySteinVI)
    state = jax.jit(stein.init)(jax.random.PRNGKey(0), X, y)
    W0 = np.asarray(stein.get_params(state)["feature_frequencies_map"])
    new, _ = jax.jit(stein.update)(state, X, y)
    step = np.asarray(stein.get_params(new)["feature_frequencies_map"]) - W0  # SGD(1): the Stein force

    # by hand: score of log p(y|Ω_j) + log p(Ω_j) (notes' formula, autodiff), pooled bandwidth, eq. (26)
    ell = np.array([0.5, 0.8])

    def log_target(W):
        proj = W @ (X / ell).T
        P = jnp.vstack([jnp.cos(proj), jnp.sin(proj)]) / jnp.sqrt(R)
        A = P @ P.T + 0.05 * jnp.eye(2 * R)
        quad = y @ y - (P @ y) @ jnp.linalg.solve(A, P @ y)
        lik = -quad / 0.1 - 0.5 * jnp.linalg.slogdet(A)[1] + R * jnp.log(0.05) - 5 * jnp.log(2 * jnp.pi * 0.05)
        return lik + jnp.sum(jax.scipy.stats.norm.logpdf(W, 0.0, 3.0))

    scores = np.stack([np.asarray(jax.jit(jax.grad(log_target))(jnp.asarray(W))) for W in W0])
    pooled = W0.reshape(-1, 2)
    h = np.median((pooled[:, None] - pooled[None]) ** 2, axis=(0, 1))
    kappa = lambda a, b: np.exp(-0.5 * np.sum((a - b) ** 2 / h))  # noqa: E731
    ref = np.zeros_like(W0)
    for m in range(M):
        for k in range(R):
            for j in range(M):
                for l in range(R):
                    kv = kappa(W0[m, k], W0[j, l])
                    ref[m, k] += (kv * scores[j, l] + alpha * kv * (W0[m, k] - W0[j, l]) / h) / M
    np.testing.assert_allclose(step, ref, rtol=1e-9, atol=1e-12)
    # and numpyro's stock SteinVI, through its generic matrix-kernel divergence, takes the same step
    stock = make(SteinVI)
    state2 = jax.jit(stock.init)(jax.random.PRNGKey(0), X, y)
    new2, _ = jax.jit(stock.update)(state2, X, y)
    np.testing.assert_allclose(stock.get_params(new2)["feature_frequencies_map"], W0 + ref, rtol=1e-9)


def test_msrfr_mixture_predictive_and_inference_data():
    X, y = regression_data(40, 2)
    Xs = jnp.asarray(np.random.default_rng(9).uniform(0, 1, (5, 2)))
    kernel = psg.SquaredExponential(variance=1.0, lengthscale=psg.Param(jnp.array([0.4, 0.4]),
                                                                        dist.constraints.positive))
    gp = SparseSpectrumGP(kernel, Gaussian(0.02), frequencies=dist.Normal(0.0, 3.0).expand((4, 2)).to_event(2))
    res = fit_msrfr(gp, X, y, jax.random.PRNGKey(0), num_particles=3, num_steps=30, lr=0.05,
                    lr_shared=0.01, repulsion=1.0, annealing_power=0.5)
    assert np.all(np.isfinite(np.asarray(res.losses)))
    W, ell = np.asarray(res.particles["feature_frequencies"]), np.asarray(res.shared["kernel_lengthscale"])
    out = gp.predict_particles(Xs, X, y, res.values())
    # per particle the exact weight-space posterior (notes eqs. 7–8), mixed as in Algorithm 2
    means, vars_ = [], []
    for Wm in W:
        proj = lambda Z: Wm @ (np.asarray(Z) / ell).T  # noqa: E731
        P, Ps = (np.vstack([np.cos(proj(Z)), np.sin(proj(Z))]) / 2.0 for Z in (X, Xs))
        A = P @ P.T + 0.02 * np.eye(8)
        means.append(Ps.T @ np.linalg.solve(A, P @ np.asarray(y)))
        vars_.append(0.02 * np.sum(Ps * np.linalg.solve(A, Ps), 0))
    means, vars_ = np.array(means), np.array(vars_)
    np.testing.assert_allclose(out["f_mean_draws"], means, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(out["f_mean"], means.mean(0), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(out["f_var"], vars_.mean(0) + means.var(0), rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(out["y_var_draws"], vars_ + 0.02, rtol=1e-6)
    idata = stein_inference_data(res, gp, X, y)
    post = idata.posterior
    assert post["feature_frequencies"].dims == ("chain", "draw", "particle", "frequency", "input_dim")
    np.testing.assert_allclose(post["feature_frequencies"].values[0, 0], W)
    np.testing.assert_allclose(post["kernel_lengthscale"].values[0, 0], ell)
    lml = [gp.log_marginal_likelihood({"feature_frequencies": Wm, "kernel_lengthscale": ell}, X, y) for Wm in W]
    np.testing.assert_allclose(idata.sample_stats["log_marginal_likelihood"].values[0, 0], lml, rtol=1e-10)
    diag = stein_diagnostics(idata)
    pair = [np.sqrt(np.mean((W[i] - W[j]) ** 2)) for i in range(3) for j in range(3) if i != j]
    np.testing.assert_allclose([diag["particle_distance_min"], diag["particle_distance_mean"]],
                               [min(pair), np.mean(pair)], rtol=1e-12)
    w = np.exp(np.array(lml) - max(lml))
    np.testing.assert_allclose(diag["lml_weight_ess"], w.sum() ** 2 / np.sum(w ** 2), rtol=1e-10)
    assert diag["stein_force_final"] == float(res.losses[-1])


def test_frequency_steinvi_uses_the_closed_form_divergence():
    # the hook of compat.SteinVIWithDivergence is what SteinVI calls (else the slow generic path would run
    # silently and give the same numbers): count the closed-form divergences while tracing one step
    gp, X, y, make = tiny_msrfr()
    calls = []

    class Counting(FrequencySteinVI):
        def kernel_divergence(self, kernel, x, y):
            out = super().kernel_divergence(kernel, x, y)
            calls.append(out is not None)
            return out

    stein = make(Counting)
    state = jax.jit(stein.init)(jax.random.PRNGKey(0), X, y)
    jax.eval_shape(stein.update, state, X, y)
    assert calls and all(calls)


def test_adamw_takes_the_decoupled_weight_decay_step():
    # θ ← θ − η_name (m̂ / (√v̂ + ε) + λθ), written out in NumPy, through AdamW's own methods and through
    # SVI (which calls eval_and_update) on the loss ½‖a − 1‖² + ½ b², whose gradients are (a − 1, b)
    lr = {"a": 0.1, "b": 0.03}
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, 0.05
    theta = {"a": np.array([0.5, -2.0, 3.0]), "b": np.array(1.5)}
    m = {k: np.zeros_like(v) for k, v in theta.items()}
    v = {k: np.zeros_like(x) for k, x in theta.items()}
    ref = []
    for t in range(1, 6):
        g = {"a": theta["a"] - 1.0, "b": theta["b"]}
        for k in theta:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            mh, vh = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            theta[k] = theta[k] - lr[k] * (mh / (np.sqrt(vh) + eps) + wd * theta[k])
        ref.append({k: x.copy() for k, x in theta.items()})

    optim = AdamW(lambda name: lr[name], weight_decay=wd, b1=b1, b2=b2, eps=eps)
    state = optim.init({"a": jnp.array([0.5, -2.0, 3.0]), "b": jnp.array(1.5)})
    for t in range(5):
        p = optim.get_params(state)
        state = optim.update({"a": p["a"] - 1.0, "b": p["b"]}, state)
        for k in ref[t]:
            np.testing.assert_allclose(optim.get_params(state)[k], ref[t][k], rtol=1e-12)

    def model():
        a = numpyro.param("a", jnp.array([0.5, -2.0, 3.0]))
        b = numpyro.param("b", jnp.array(1.5))
        numpyro.factor("loss", -0.5 * jnp.sum((a - 1.0) ** 2) - 0.5 * b ** 2)

    res = SVI(model, lambda: None, optim, Trace_ELBO()).run(jax.random.PRNGKey(0), 5, progress_bar=False)
    for k in ref[-1]:
        np.testing.assert_allclose(res.params[k], ref[-1][k], rtol=1e-12)


def test_bad_input_is_rejected():
    X, y = regression_data()
    gp = SparseSpectrumGP(psg.SquaredExponential(lengthscale=dist.LogNormal(0, 1)), Gaussian(0.1),
                          num_frequencies=2, input_dim=2)
    with pytest.raises(ValueError, match="Params"):
        fit_msrfr(gp, X, y, jax.random.PRNGKey(0), num_particles=2, num_steps=1)
    gp = SparseSpectrumGP(psg.SquaredExponential(), Gaussian(0.1), frequencies=np.ones((2, 2)))
    with pytest.raises(ValueError, match="prior"):
        fit_msrfr(gp, X, y, jax.random.PRNGKey(0), num_particles=2, num_steps=1)
    with pytest.raises(ValueError, match="input_dim"):
        FrequencyRBFKernel(0)
