"""The q(u) families (:mod:`ppl_sparsegp.approximations.variational`): each family's covariance operator
equals the dense matrix formed here from its params (full LLᵀ, diagonal s², block-diagonal
blockdiag(L_t L_tᵀ) with equal or unequal blocks, two-Kronecker ⊗L_dL_dᵀ + ⊗J_dJ_dᵀ), each starts at the
prior (centred: Kuu, or its diagonal; whitened: I), ``"auto"`` follows Kuu's structure, a bad ``q_cov``
names the choices; and the two-Kronecker KL equals the dense KL."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from scipy.linalg import block_diag

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.variational import (
    block_diagonal_covariance,
    default_family,
    diagonal_covariance,
    full_covariance,
    resolve_q_family,
    two_kronecker_covariance,
)
from ppl_sparsegp.features import FourierFeatures, KroneckerFeatures
from ppl_sparsegp.linalg import BlockDiag, Dense, DiagPlusLowRank, Kronecker, KroneckerSum, StackedBlockDiag

RNG = np.random.default_rng(0)


def spd(n):
    A = RNG.normal(size=(n, n))
    return A @ A.T / n + 0.5 * np.eye(n)


def lower(*shape):
    L = np.tril(RNG.normal(size=shape)) * 0.5
    i = np.arange(shape[-1])
    L[..., i, i] = np.abs(L[..., i, i]) + 0.3
    return L


K2, K3, K3b, K5 = spd(2), spd(3), spd(3), spd(5)
D4, B4 = RNG.uniform(0.5, 1.0, 4), RNG.normal(size=(4, 1))  # a diagonal-plus-rank-1 block: R is 4 × 5
# family, Kmm, whiten, params (None: the initial ones), the dense q covariance they should give
CASES = {
    "full-centred": (full_covariance, Dense(K5), False, {"q_scale_tril": (L5 := lower(5))}, L5 @ L5.T),
    "full-centred-init": (full_covariance, Dense(K5), False, None, K5),
    "full-whitened-init": (full_covariance, Dense(K5), True, None, np.eye(5)),
    "diag-centred": (diagonal_covariance, Dense(K5), False, {"q_scale": (s5 := RNG.uniform(0.5, 2, 5))},
                     np.diag(s5**2)),
    "diag-centred-init": (diagonal_covariance, Dense(K5), False, None, np.diag(np.diag(K5))),
    "diag-whitened-init": (diagonal_covariance, Dense(K5), True, None, np.eye(5)),
    "block-diag-stacked": (block_diagonal_covariance, StackedBlockDiag(np.stack([K3, K3b])), False,
                           {"q_scale_tril": (L33 := lower(2, 3, 3))}, block_diag(*[L @ L.T for L in L33])),
    "block-diag-stacked-init": (block_diagonal_covariance, StackedBlockDiag(np.stack([K3, K3b])), False, None,
                                block_diag(K3, K3b)),
    "block-diag-unequal": (block_diagonal_covariance, BlockDiag((Dense(K2), DiagPlusLowRank(D4, B4))), False,
                           {"q_scale_tril_0": (L2 := lower(2, 2)), "q_scale_tril_1": (L4 := lower(4, 4))},
                           block_diag(L2 @ L2.T, L4 @ L4.T)),
    "block-diag-unequal-init": (block_diagonal_covariance, BlockDiag((Dense(K2), DiagPlusLowRank(D4, B4))), False,
                                None, block_diag(K2, np.diag(D4) + B4 @ B4.T)),
    # whitened, a block's size is its root's column count (2 and 4 + 1)
    "block-diag-unequal-whitened-init": (block_diagonal_covariance, BlockDiag((Dense(K2), DiagPlusLowRank(D4, B4))),
                                         True, None, np.eye(7)),
    "two-kron": (two_kronecker_covariance, Kronecker((Dense(K2), Dense(K3))), False,
                 {"q_L0": (La := lower(2, 2)), "q_L1": (Lb := lower(3, 3)), "q_J0": (Ja := RNG.normal(size=(2, 2))),
                  "q_J1": (Jb := RNG.normal(size=(3, 3)))},
                 np.kron(La @ La.T, Lb @ Lb.T) + np.kron(Ja @ Ja.T, Jb @ Jb.T)),
    "two-kron-init": (two_kronecker_covariance, Kronecker((Dense(K2), Dense(K3))), False, None,
                      np.kron(K2, K3) + np.kron(np.diag(np.linspace(1e-2, 2e-2, 2)) ** 2,
                                                np.diag(np.linspace(1e-2, 2e-2, 3)) ** 2)),
}


@jax.jit
def _operators(params):
    """(loc, S.to_dense()) of every case, in one compilation."""
    out = {}
    for name, (family, Kmm, whiten, _, _) in CASES.items():
        dim = Kmm.sqrt_cols if whiten else Kmm.size
        with handlers.seed(rng_seed=0), handlers.substitute(data=params.get(name, {})):
            loc, S = family("q", dim, Kmm, whiten)
        out[name] = (loc, S.to_dense())
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_covariance_operator_equals_its_dense_form(name):
    """Rounding only (relative 1e-12)."""
    params = {n: {k: jnp.asarray(v) for k, v in c[3].items()} for n, c in CASES.items() if c[3] is not None}
    loc, S = _operators(params)[name]
    np.testing.assert_allclose(S, CASES[name][4], rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(loc, np.zeros(len(S)))  # the mean starts at the prior's, 0


def test_auto_follows_the_structure_of_kuu():
    """Block-diagonal q for stacked equal blocks (harmonic features' Kuu, the HVGP's q), full otherwise."""
    assert default_family(StackedBlockDiag(np.stack([K3, K3b]))) is block_diagonal_covariance
    for Kmm in (Dense(K5), BlockDiag((Dense(K2), Dense(K3))), Kronecker((Dense(K2), Dense(K3))),
                DiagPlusLowRank(D4, B4)):
        assert default_family(Kmm) is full_covariance, type(Kmm).__name__
    for name, family in [("full", full_covariance), ("diag", diagonal_covariance),
                         ("block-diag", block_diagonal_covariance), ("two-kron", two_kronecker_covariance)]:
        assert resolve_q_family(name) is family
    assert resolve_q_family(full_covariance) is full_covariance  # a callable is used as is


def test_bad_q_cov_names_the_choices():
    with pytest.raises(ValueError, match=r"q_cov must be one of 'auto', 'full', 'diag', 'block-diag', "
                                         r"'two-kron' or a callable, got 'kron'.*did you mean 'two-kron'"):
        resolve_q_family("kron")
    with pytest.raises(ValueError, match="q_cov must be one of"):
        psg.SparseGP(psg.InducingPoints(np.zeros((2, 1))), psg.Matern32(), q_cov="block")
    with handlers.seed(rng_seed=0):
        with pytest.raises(ValueError, match="block_diagonal_covariance needs a BlockDiag Kmm, got Dense"):
            block_diagonal_covariance("q", 5, Dense(K5), False)
        with pytest.raises(ValueError, match="two_kronecker_covariance needs Kronecker features"):
            two_kronecker_covariance("q", 5, Dense(K5), False)
        with pytest.raises(ValueError, match=r"dim 6 does not match the block sizes \(2, 3\)"):
            block_diagonal_covariance("q", 6, BlockDiag((Dense(K2), Dense(K3))), False)


def test_two_kronecker_kl_equals_dense_kl():
    kl = jax.jit(psg.gaussian_kl)  # one compilation per pair of structures, not one per operation
    rng = np.random.default_rng(4)
    Ls = tuple(np.tril(rng.normal(size=(n, n))) + 2 * np.eye(n) for n in (3, 5))
    Js = tuple(rng.normal(size=(n, n)) * 0.3 for n in (3, 5))
    S = KroneckerSum(Ls, Js)
    m = rng.normal(size=15)
    feature = KroneckerFeatures([FourierFeatures(-1, 2, 2), FourierFeatures(-1, 2, 3)])
    kernel = psg.Product([psg.Matern12(1.0, 0.5), psg.Matern52(1.0, 0.3)])
    Kmm = jax.jit(psg.Kuu)(feature, kernel)
    Kd, Sd = np.asarray(Kmm.to_dense()), np.asarray(S.to_dense())
    dense = 0.5 * (np.trace(np.linalg.solve(Kd, Sd)) + m @ np.linalg.solve(Kd, m) - 15
                   + np.linalg.slogdet(Kd)[1] - np.linalg.slogdet(Sd)[1])
    np.testing.assert_allclose(kl(jnp.asarray(m), S, Kmm), dense, rtol=1e-9)
    # whitened: p = N(0, I)
    Sw = KroneckerSum(tuple(np.tril(rng.normal(size=(n, n))) + 2 * np.eye(n) for n in (4, 5)),
                      tuple(rng.normal(size=(n, 2)) for n in (4, 5)))
    mw = rng.normal(size=20)
    Swd = np.asarray(Sw.to_dense())
    densew = 0.5 * (np.trace(Swd) + mw @ mw - 20 - np.linalg.slogdet(Swd)[1])
    np.testing.assert_allclose(kl(jnp.asarray(mw), Sw, psg.linalg.Identity(20)), densew,
                               rtol=1e-9)
