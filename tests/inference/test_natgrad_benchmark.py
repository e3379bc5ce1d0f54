"""The natural-gradient benchmark's minibatch method (inference/benchmarks/natural_gradients.py) against an
independent computation: with a Gaussian likelihood and fixed hyperparameters, one epoch of natural-gradient
steps on the disjoint minibatches of one permutation with γ_t = 1/(t+1) lands on the optimal q(u) of all
rows (the dense formula), because each step with γ moves q's natural parameters to (1 − γ)θ + γθ̂_B and the
mean of the minibatch optima θ̂_B (data terms scaled by N/B) is the optimum of all rows. float64 (conftest)."""
import jax
import numpy as np
import pytest
from numpyro.infer import SVI

import ppl_sparsegp as psg
from inference.benchmarks.natural_gradients import _blocks, natgrad_gamma
from ppl_sparsegp import SparseGP
from ppl_sparsegp.features import InducingPoints
from ppl_sparsegp.kernels import SquaredExponential
from ppl_sparsegp.likelihoods import Gaussian
from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient

KERNEL = SquaredExponential(variance=1.3, lengthscale=0.8)
NOISE = 0.05


def _optimum(feature, X, y):
    """Whitened optimal q of all rows, densely: S* = (I + AAᵀ/σ²)⁻¹, m* = S*Ay/σ², A = R⁻¹Kuf."""
    Kmm = np.asarray(psg.Kuu(feature, KERNEL).to_dense())
    A = np.linalg.solve(np.linalg.cholesky(Kmm), np.asarray(psg.Kuf(feature, KERNEL, X)))
    S = np.linalg.inv(np.eye(len(Kmm)) + A @ A.T / NOISE)
    return S @ A @ y / NOISE, S


def test_blocks_are_one_permutation_per_epoch():
    """Each epoch's blocks hold N // B disjoint minibatches of B rows, in about four blocks."""
    X, y = np.arange(46.0)[:, None], np.arange(46.0)
    blocks = list(_blocks(X, y, 5, 9, 2))
    assert len(blocks) == 8 and [len(b[0]) for b in blocks[:4]] == [3, 2, 2, 2]
    for epoch in (blocks[:4], blocks[4:]):
        rows = np.concatenate([b[1].reshape(-1) for b in epoch])
        assert len(rows) == 45 and len(np.unique(rows)) == 45
        np.testing.assert_array_equal(np.concatenate([b[0].reshape(-1) for b in epoch]), rows)


@pytest.mark.parametrize("B", [10, 40])
def test_one_pass_with_harmonic_gamma_is_the_optimum_of_all_rows(B):
    """Four disjoint minibatches of 10 (or the full batch, one step with γ = 1) from the prior give the
    optimal q of all 40 rows to 1e-8 (round-off of M = 5 systems in float64 is ~1e-13); a constant
    γ = 0.5 does not (the check can fail: it leaves part of the prior in q)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (40, 1))
    y = np.sin(2 * X[:, 0]) + np.sqrt(NOISE) * rng.standard_normal(40)
    feature = InducingPoints(np.linspace(-3, 3, 5)[:, None])
    gp = SparseGP(feature, KERNEL, Gaussian(variance=NOISE))
    m_star, S_star = _optimum(feature, X, y)
    for gamma, exact in ((natgrad_gamma(None, 0.0, full_batch=False), True), (0.5, False)):
        svi = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=gamma), AnalyticELBO(gp))
        state = svi.init(jax.random.PRNGKey(0), X, y)
        for Xb, yb in _blocks(X, y, B, 40 // B, 1):
            for t in range(len(Xb)):
                state, _ = svi.update(state, Xb[t], yb[t], num_data=40)
        p = svi.get_params(state)
        m, L = np.asarray(p["f_v_loc"]), np.asarray(p["f_v_scale_tril"])
        close = np.allclose(m, m_star, rtol=1e-8, atol=1e-10) and np.allclose(L @ L.T, S_star, rtol=1e-8,
                                                                                atol=1e-10)
        assert close == exact, (gamma, B)


def test_gamma_schedule():
    """γ_t = max(1/(t+1), floor) with minibatches, 1 on the full batch, a given γ as it is."""
    g = natgrad_gamma(None, 0.05, full_batch=False)
    np.testing.assert_allclose([float(g(t)) for t in (0, 1, 3, 19, 100)], [1, 0.5, 0.25, 0.05, 0.05])
    assert natgrad_gamma(None, 0.0, full_batch=True) == 1.0 and natgrad_gamma(0.3, 0.0, full_batch=False) == 0.3
