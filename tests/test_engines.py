"""The library's fitting loops (ppl_sparsegp.engines): the divergence watch of fit_svi against losses
computed by hand (SGD and Adam on a quadratic), on the natural-gradient step that overshoots (γ = 1 on a
mean-field q of a coupled posterior) and without false alarms on noisy minibatch and Monte Carlo ELBOs;
fit_nuts against an analytic posterior; the arguments' checks. (The blocks, the progress bar and the
non-finite stop: tests/inference/test_runner.py, which runs the same loop.)"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import optim
from numpyro.infer import Trace_ELBO

import ppl_sparsegp as psg
from ppl_sparsegp import Gaussian, InducingPoints, SparseGP, SquaredExponential
from ppl_sparsegp.engines import NonFiniteLossError, SVIDivergenceError, fit_nuts, fit_svi
from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient


def _quadratic():
    p = numpyro.param("p", 1.0)
    numpyro.factor("f", -p**2)  # the loss p²


def _no_guide():
    pass


def test_geometric_growth_raises_with_the_step_and_the_last_good_params():
    """SGD(1.5) on the loss p² from p = 1: p ← −2p, the loss 4^k (k = 0, 1, ...), all finite. In blocks of 2
    the scale is max(|ℓ₁|, |best|) = 1 (two losses: no noise estimate); block medians 2.5, 40, 640, 10 240,
    163 840: the last two exceed the best (1, step 1's loss, never improved) by 10³ × the scale, so the fit
    stops after step 10, with the params of the start (no block improved on it)."""
    with pytest.raises(SVIDivergenceError) as raised:
        fit_svi(_quadratic, num_steps=40, rng_key=jax.random.PRNGKey(0), optim=optim.SGD(1.5), guide=_no_guide,
                elbo=Trace_ELBO(), block_size=2)
    e = raised.value
    assert isinstance(e, FloatingPointError) and not isinstance(e, NonFiniteLossError)
    assert e.step == 10 and e.best_step == 0
    np.testing.assert_allclose(e.losses, 4.0 ** np.arange(10), rtol=1e-12)
    assert float(e.params["p"]) == 1.0
    message = str(e)
    assert message.startswith("SVI diverged at step 10 of 40: the loss grew from its best, 1 (at the start)")
    assert "Likely cause: the learning rate (the step size of SGD)" in message and "lower it" in message


def _plateau():
    p = numpyro.param("p", 0.1)
    numpyro.factor("f", jnp.expm1(-p**2))  # the loss 1 − exp(−p²): 0.00995 at the start, flat ≈ 1 for |p| ≫ 1


def test_a_fit_that_ends_far_worse_than_it_started_raises_naming_lr():
    """Adam(lr = 5) on the loss 1 − exp(−p²) from p = 0.1: Adam's first step has length lr, to p = −4.9
    where the loss is 1 − e⁻²⁴ and flat, so it stays there (finite, no growth by 10³): the end check
    (a last median of 1 against 0.00995 at step 1, above the scale 0.00995), naming lr; lr = 0.01
    converges and raises nothing."""
    with pytest.raises(SVIDivergenceError, match=r"ended far worse than it started.*learning rate \(lr = 5\)"):
        fit_svi(_plateau, num_steps=30, rng_key=jax.random.PRNGKey(0), lr=5.0, guide=_no_guide,
                elbo=Trace_ELBO(), block_size=5)
    result, _ = fit_svi(_plateau, num_steps=30, rng_key=jax.random.PRNGKey(0), lr=0.01, guide=_no_guide,
                        elbo=Trace_ELBO(), block_size=5)
    assert float(result.losses[-1]) < float(result.losses[0])
    result, _ = fit_svi(_plateau, num_steps=30, rng_key=jax.random.PRNGKey(0), lr=5.0, guide=_no_guide,
                        elbo=Trace_ELBO(), block_size=5, divergence_factor=None)  # the watch off
    np.testing.assert_allclose(result.losses[1:], 1.0, rtol=1e-9)


def _mean_field(noise=1e-2):
    """A mean-field SparseGP on a coupled posterior (λ_max(D⁻¹Λ) ≈ 2.8: γ = 1 is a diverging Jacobi
    iteration; tests/optim/test_natural_gradients.py)."""
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, (40, 1))
    y = np.sin(3 * X[:, 0]) + np.sqrt(noise) * rng.standard_normal(40)
    gp = SparseGP(InducingPoints(np.linspace(-1, 1, 6)[:, None]), SquaredExponential(variance=1.0, lengthscale=0.5),
                  Gaussian(variance=noise), q_cov="diag")
    return gp, X, y


def test_natural_gradient_overshoot_raises_naming_gamma_and_the_fix():
    """NaturalGradient with γ = 1 given (no line search) on a mean-field q of a coupled posterior: the loss
    grows ×2-3 per step, finite; fit_svi stops it naming γ and the fix; the default step does not."""
    gp, X, y = _mean_field()
    with pytest.raises(SVIDivergenceError) as raised:
        fit_svi(gp, X, y, num_steps=100, rng_key=jax.random.PRNGKey(0), optim=NaturalGradient(gp, gamma=1.0),
                elbo=AnalyticELBO(gp))
    e = raised.value
    assert e.step < 100 and np.all(np.isfinite(e.losses)) and e.losses[-1] > 1e3 * abs(e.losses[0])
    message = str(e)
    assert "natural-gradient step size γ" in message and "line_search=True" in message and "drop --gamma" in message
    assert np.all(np.isfinite(e.params["f_v_loc"]))
    result, _ = fit_svi(gp, X, y, num_steps=100, rng_key=jax.random.PRNGKey(0), optim=NaturalGradient(gp),
                        elbo=AnalyticELBO(gp))
    assert float(result.losses[-1]) < float(result.losses[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_minibatch_fits_that_converge_raise_nothing(seed):
    """No false alarm: SVGP by Adam on a Monte Carlo ELBO over minibatches of 8 of 200 rows (the loss's
    noise is a large part of its size: checked), three seeds, learnt hyperparameters."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (200, 1))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(200)
    pos = dist.constraints.positive
    gp = SparseGP(InducingPoints(np.linspace(-3, 3, 8)[:, None]),
                  SquaredExponential(psg.Param(1.0, pos), psg.Param(1.0, pos)), Gaussian(psg.Param(0.5, pos)))
    result, _ = fit_svi(gp, X, y, num_steps=400, rng_key=jax.random.PRNGKey(seed), lr=0.02,
                        model_kwargs={"batch_size": 8})
    losses = np.asarray(result.losses)
    assert np.std(np.diff(losses[-100:])) > 0.1 * abs(np.median(losses[-100:]))  # a noisy loss
    assert np.median(losses[-50:]) < np.median(losses[:50])  # and a fit that converged


def test_fit_nuts_matches_the_conjugate_posterior():
    """μ ~ N(0, 1), yᵢ ~ N(μ, 1): the posterior is N(Σy/(n+1), 1/(n+1)); 2 chains of 1000 draws: the
    mean within 5 Monte Carlo standard errors (ESS ≥ 500 assumed), the sd within 10 %."""
    y = np.random.default_rng(0).normal(0.7, 1.0, 12)

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    mcmc, seconds = fit_nuts(model, y, rng_key=jax.random.PRNGKey(0), num_warmup=300, num_samples=1000,
                             num_chains=2, chain_method="sequential")
    draws = np.asarray(mcmc.get_samples()["mu"])
    mean, sd = y.sum() / (len(y) + 1), 1 / math.sqrt(len(y) + 1)
    assert draws.shape == (2000,) and seconds > 0
    assert abs(draws.mean() - mean) < 5 * sd / math.sqrt(500)
    assert abs(draws.std() / sd - 1) < 0.1
    assert set(mcmc.get_extra_fields()) >= {"diverging", "accept_prob"}


@pytest.mark.parametrize("kwargs, match", [
    ({"num_steps": 0}, "fit_svi: num_steps must be a positive integer, got 0"),
    ({"num_steps": 2.5}, "num_steps must be a positive int"),
    ({"block_size": -1}, "block_size must be None or a positive integer"),
    ({"lr": -0.1}, "lr must be a finite number > 0"),
    ({"lr": float("nan")}, r"lr must be a finite number > 0, got nan \(not finite\)"),
    ({"divergence_factor": 1.0}, "divergence_factor must be None or a finite number > 1"),
    ({"guide": None}, "no guide"),
])
def test_fit_svi_refuses_bad_arguments(kwargs, match):
    args = {"num_steps": 5, "rng_key": jax.random.PRNGKey(0), "guide": _no_guide, **kwargs}
    with pytest.raises(ValueError, match=match):
        fit_svi(_quadratic, **args)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_warmup": -1}, "num_warmup must be a non-negative integer, got -1"),
    ({"num_samples": 0}, "num_samples must be a positive int"),
    ({"num_chains": 0}, "num_chains must be a positive int"),
    ({"target_accept_prob": 1.5}, r"target_accept_prob must be a number in \(0, 1\)"),
    ({"max_tree_depth": 0}, "max_tree_depth must be a positive int"),
])
def test_fit_nuts_refuses_bad_arguments(kwargs, match):
    args = {"rng_key": jax.random.PRNGKey(0), "num_warmup": 5, "num_samples": 5, **kwargs}
    with pytest.raises(ValueError, match=match):
        fit_nuts(_quadratic, **args)


def test_the_watch_on_simulated_loss_curves():
    """The rule itself on 600 simulated curves (no JAX): converging losses (levels −10³ … 10⁴, 40 to 5 000
    steps, Student-t(3) noise up to 3× the level) never raise; a geometric growth (×1.1-3 per step, from a
    random step on) is always caught: within 2 blocks of passing 10³ × its scale, or at the end."""
    from types import SimpleNamespace

    from ppl_sparsegp.engines import _DivergenceWatch

    svi = SimpleNamespace(optim=None)

    def run(L, block):
        watch = _DivergenceWatch(1e3, len(L), {})
        for i in range(0, len(L), block):
            watch.update(L[i:i + block], i + len(L[i:i + block]), {}, L[:i + block], svi, 0.01)

    for seed in range(400):
        rng = np.random.default_rng(seed)
        n = int(rng.choice([40, 200, 1000, 5000]))
        level = rng.choice([-1e3, -10.0, 0.0, 1.0, 1e4])
        trend = level + abs(level + 50) * 5 * np.exp(-np.arange(n) / (n / 10))
        run(trend + rng.choice([0.01, 0.3, 1.0, 3.0]) * (abs(level) + 1) * rng.standard_t(3, n), max(n // 20, 1))
    for seed in range(200):
        rng = np.random.default_rng(seed)
        L = 100 + 10 * rng.standard_normal(200)
        k = int(rng.integers(20, 150))
        L[k:] *= rng.uniform(1.1, 3.0) ** np.arange(200 - k)
        with pytest.raises(SVIDivergenceError) as raised:
            run(L, 10)
        above = L > 1e3 * 115  # 10³ × the scale, max(|ℓ₁|, |best|) ≤ 115 here
        if above.any():  # within the 2 blocks after the block where the growth passes it
            assert raised.value.step <= min(int(np.argmax(above)) + 30, 200), (seed, raised.value.step)
        else:  # a slow growth that never gets there: the end check
            assert raised.value.step == 200 and "ended far worse than it started" in str(raised.value)
