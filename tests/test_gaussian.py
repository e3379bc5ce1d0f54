"""The structured Gaussian and the library's one KL (:mod:`ppl_sparsegp.gaussian`) against dense matrices:
``StructuredNormal.log_prob`` against scipy's multivariate normal, the moments of its draws against the
operator's dense covariance, and ``gaussian_kl`` (and the ``kl_divergence`` that ``TraceMeanField_ELBO``
calls) against the closed-form KL of dense matrices, for each operator as q and as prior. The operators'
own arithmetic (solve, logdet, trace_solve, ...) is checked in test_linalg.py."""
import jax
import numpy as np
import pytest
from numpyro.distributions.kl import kl_divergence
from scipy import stats
from scipy.linalg import block_diag

from ppl_sparsegp import StructuredNormal, gaussian_kl
from ppl_sparsegp.linalg import BlockDiag, Dense, Diagonal, DiagPlusLowRank, Identity

RNG = np.random.default_rng(0)


def spd(n):
    A = RNG.normal(size=(n, n))
    return A @ A.T / n + 0.5 * np.eye(n)


def lower(n):
    L = np.tril(RNG.normal(size=(n, n))) * 0.5
    L[np.diag_indices(n)] = np.abs(L[np.diag_indices(n)]) + 0.5
    return L


def structured_and_dense(kind, *arrays):
    """(operator, its dense matrix formed here with NumPy)."""
    if kind == "dense":
        return Dense(arrays[0]), arrays[0]
    if kind == "chol":
        return Dense.from_cholesky(arrays[0]), arrays[0] @ arrays[0].T
    if kind == "diagonal":
        return Diagonal(arrays[0]), np.diag(arrays[0])
    if kind == "dplr":
        return DiagPlusLowRank(*arrays), np.diag(arrays[0]) + arrays[1] @ arrays[1].T
    ops, dense = zip(*arrays)  # "blocks": pairs (operator, dense)
    return BlockDiag(ops), block_diag(*dense)


# size-6 covariances: dense, diagonal, and block-diagonal with a dense block and a diagonal-plus-low-rank
# block whose square root [D^½, B] is non-square (4 × 5, as VFF's Kuu)
COVS = {
    "dense": structured_and_dense("dense", spd(6)),
    "diagonal": structured_and_dense("diagonal", RNG.uniform(0.5, 2.0, 6)),
    "blockdiag": structured_and_dense("blocks", structured_and_dense("dense", spd(2)),
                                      structured_and_dense("dplr", RNG.uniform(0.5, 1.0, 4), RNG.normal(size=(4, 1)))),
}
# q(u) covariances as the q families build them from free factors: full, diagonal, block-diagonal
QS = {
    "full": structured_and_dense("chol", lower(6)),
    "diag": structured_and_dense("diagonal", RNG.uniform(0.2, 3.0, 6)),
    "block-diag": structured_and_dense("blocks", structured_and_dense("chol", lower(2)),
                                       structured_and_dense("chol", lower(4))),
}
# priors, each with the q structures the library pairs with it: whitened N(0, I) with any q; a dense Kuu
# (inducing points) with q_cov "full" or "diag"; a block-diagonal Kuu (additive features) also with
# "block-diag" of the same blocks. (Two-Kronecker q against Kronecker and identity priors: test_variational.py;
# stacked blocks against the harmonic Kuu: test_harmonic.py.)
PRIORS = {
    "identity": ((Identity(6), np.eye(6)), ["full", "diag", "block-diag"]),
    "dense": (COVS["dense"], ["full", "diag"]),
    "blockdiag": (COVS["blockdiag"], ["full", "diag", "block-diag"]),
}
LOC, VALUES = RNG.normal(size=6), RNG.normal(size=(3, 6))
LOCS_Q, LOCS_P = RNG.normal(size=(3, 6)), RNG.normal(size=(3, 6))  # q means, prior means


def dense_kl(mq, Sq, mp, Sp):
    """KL(N(mq, Sq) ‖ N(mp, Sp)) from dense matrices."""
    d = mq - mp
    return 0.5 * (np.trace(np.linalg.solve(Sp, Sq)) + d @ np.linalg.solve(Sp, d) - len(d)
                  + np.linalg.slogdet(Sp)[1] - np.linalg.slogdet(Sq)[1])


# each test's library calls in one jit (op-by-op dispatch of the many small operations costs about three
# times as much to compile)
@jax.jit
def _log_probs(covs, loc, values):
    return {name: (StructuredNormal(loc, c).log_prob(values), StructuredNormal(loc, c).log_prob(values[0]),
                   StructuredNormal(loc, c).variance) for name, c in covs.items()}


@pytest.mark.parametrize("name", list(COVS))
def test_log_prob_equals_scipy(name):
    """One value and a batch (3, 6) of values; relative 1e-10 (6 × 6 matrices, condition numbers ≤ 6)."""
    batch, one, variance = _log_probs({n: c for n, (c, _) in COVS.items()}, LOC, LOC + VALUES)[name]
    ref = stats.multivariate_normal(LOC, COVS[name][1])
    np.testing.assert_allclose(batch, ref.logpdf(LOC + VALUES), rtol=1e-10)
    np.testing.assert_allclose(one, ref.logpdf(LOC + VALUES[0]), rtol=1e-10)
    np.testing.assert_allclose(variance, np.diag(COVS[name][1]), rtol=1e-12)


def test_sample_moments_equal_the_covariance():
    """20000 draws through the block-diagonal covariance with a non-square block root: the sample mean
    and covariance against loc and the dense K, each entry within 5 standard errors (sd of a sample mean
    √(K_ii/n); of a sample covariance √((K_ii K_jj + K_ij²)/n))."""
    (cov, K), n = COVS["blockdiag"], 20000
    x = np.asarray(jax.jit(lambda c: StructuredNormal(LOC, c).sample(jax.random.PRNGKey(1), (n,)))(cov))
    assert x.shape == (n, 6)
    np.testing.assert_array_less(np.abs(x.mean(0) - LOC), 5 * np.sqrt(np.diag(K) / n))
    se = np.sqrt((np.outer(np.diag(K), np.diag(K)) + K**2) / n)
    np.testing.assert_array_less(np.abs(np.cov(x.T) - K), 5 * se)


@jax.jit
def _kls(qs, priors, locs_q, locs_p):
    out = {}
    for p, P in priors.items():
        i = list(PRIORS).index(p)  # (jit hands dicts over with their keys sorted)
        for j, q in enumerate(PRIORS[p][1]):
            out[p, q] = gaussian_kl(locs_q[j], qs[q], P, locs_p[i])
        # the registered KL, as TraceMeanField_ELBO calls it: kl_divergence(q, p) for the first q
        q = PRIORS[p][1][0]
        out[p, "kl_divergence"] = kl_divergence(StructuredNormal(locs_q[0], qs[q]), StructuredNormal(locs_p[i], P))
        out[p, "self"] = gaussian_kl(locs_p[i], P, P, locs_p[i])
        out[p, "zero mean"] = gaussian_kl(locs_q[0], qs[q], P)
    return out


@pytest.mark.parametrize("prior", list(PRIORS))
def test_gaussian_kl_equals_dense_kl(prior):
    """Each q structure the library pairs with this prior, with a non-zero prior mean and with none; the
    registered ``kl_divergence(q, p)`` is KL(q ‖ p), not KL(p ‖ q); KL(p ‖ p) = 0. Relative 1e-9:
    condition numbers ≤ 21 and every term O(1)–O(10), so rounding is ~1e-14."""
    out = _kls({q: S for q, (S, _) in QS.items()}, {p: P for p, ((P, _), _) in PRIORS.items()}, LOCS_Q, LOCS_P)
    (_, Pd), qs = PRIORS[prior]
    mp = LOCS_P[list(PRIORS).index(prior)]
    for j, q in enumerate(qs):
        np.testing.assert_allclose(out[prior, q], dense_kl(LOCS_Q[j], QS[q][1], mp, Pd), rtol=1e-9, err_msg=q)
    ref = dense_kl(LOCS_Q[0], QS[qs[0]][1], mp, Pd)
    assert abs(ref - dense_kl(mp, Pd, LOCS_Q[0], QS[qs[0]][1])) > 0.1  # the test can tell KL(q‖p) from KL(p‖q)
    np.testing.assert_allclose(out[prior, "kl_divergence"], ref, rtol=1e-9)
    np.testing.assert_allclose(out[prior, "zero mean"], dense_kl(LOCS_Q[0], QS[qs[0]][1], 0 * mp, Pd), rtol=1e-9)
    np.testing.assert_allclose(out[prior, "self"], 0.0, atol=1e-12)


def test_bad_arguments():
    with pytest.raises(TypeError, match="cov must be a LinearOperator"):
        StructuredNormal(np.zeros(2), np.eye(2))
    with pytest.raises(ValueError, match=r"loc has shape \(3,\), expected \(6,\)"):
        StructuredNormal(np.zeros(3), COVS["dense"][0])
