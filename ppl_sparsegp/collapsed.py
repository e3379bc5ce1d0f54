r"""The collapsed Gaussian bound (Titsias 2009) and the exact GP marginal likelihood.

With :math:`W = R^\top K_{uu}^{-1}K_{uf}` (so :math:`Q_{ff} = W^\top W`) and
:math:`B = I + WW^\top/\sigma^2`,

.. math::

    \mathcal L = \log\mathcal N(\mathbf y\mid 0, Q_{ff}+\sigma^2 I)
                 - \tfrac{1}{2\sigma^2}\operatorname{tr}(K_{ff}-Q_{ff})
    = -\tfrac N2\log 2\pi\sigma^2 - \tfrac12\log|B| - \tfrac{\mathbf y^\top\mathbf y}{2\sigma^2}
      + \tfrac{\|L_B^{-1}W\mathbf y\|^2}{2\sigma^4} - \tfrac{\sum_n k_{nn}}{2\sigma^2}
      + \tfrac{\operatorname{tr}(WW^\top)}{2\sigma^2}.

Everything depends on the data only through the sufficient statistics
:math:`A = K_{uf}K_{fu}`, :math:`\mathbf c = K_{uf}\mathbf y`, :math:`\mathbf y^\top\mathbf y`, N and
:math:`\sum_n k(\mathbf x_n,\mathbf x_n)` [2, §5.2]; when Kuf does not depend on the hyperparameters
(VFF with all inputs inside the box) they are computed once and each step costs O(M³).

References:
    1. Titsias (2009), Variational learning of inducing variables in sparse Gaussian processes.
    2. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, eqs. 29–30.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

from ._module import check_finite, check_positive
from .features.base import Kuf, Kuu
from .kernels import Additive, Product, Stationary, check_inputs
from .linalg import BlockDiag, Dense

__all__ = ["SufficientStatistics", "sufficient_statistics", "collapsed_elbo", "collapsed_elbo_from_stats",
           "optimal_whitened_q", "exact_log_marginal_likelihood", "constant_kernel_diagonal"]


class SufficientStatistics(NamedTuple):
    """``A = Kuf Kufᵀ`` (M, M), ``c = Kuf y`` (M,), ``yy = yᵀy``, ``n`` = N, and for centring by a
    constant mean ``f1 = Kuf 1`` (M,) and ``ysum = Σ y`` (optional). They add over blocks of data."""

    A: jnp.ndarray
    c: jnp.ndarray
    yy: jnp.ndarray
    n: jnp.ndarray
    f1: jnp.ndarray | None = None
    ysum: jnp.ndarray | None = None

    def centred(self, mean):
        r"""The statistics of :math:`\mathbf y - \mu\mathbf 1` for a constant mean μ:
        :math:`\mathbf c - \mu\mathbf f_1`, :math:`\mathbf y^\top\mathbf y - 2\mu\sum y + \mu^2 N`,
        :math:`\sum y - \mu N` (A, f1 and N are unchanged)."""
        if self.f1 is None or self.ysum is None:
            raise ValueError("these SufficientStatistics have no f1 = Kuf·1 and ysum = Σy, so they cannot "
                             "be centred by a constant mean; compute them with sufficient_statistics or "
                             "fourier_statistics")
        return self._replace(c=self.c - mean * self.f1, yy=self.yy - 2 * mean * self.ysum + mean**2 * self.n,
                             ysum=self.ysum - mean * self.n)


def sufficient_statistics(Kmn, y) -> SufficientStatistics:
    """The statistics of one block of data (they add over blocks)."""
    return SufficientStatistics(Kmn @ Kmn.T, Kmn @ y, jnp.dot(y, y), jnp.asarray(y.shape[0], Kmn.dtype),
                                jnp.sum(Kmn, axis=1), jnp.sum(y))


def constant_kernel_diagonal(kernel):
    r"""k(x, x) of a kernel whose diagonal does not depend on x (stationary kernels and sums/products of
    them), so that :math:`\sum_n k(\mathbf x_n, \mathbf x_n) = N\,k(\mathbf x,\mathbf x)` needs no data.

    :raises ValueError: for any other kernel.
    """
    if isinstance(kernel, Stationary):
        return jnp.asarray(kernel.variance)
    if isinstance(kernel, Additive):
        return sum(constant_kernel_diagonal(k) for k in kernel.kernels)
    if isinstance(kernel, Product):
        out = 1.0
        for k in kernel.kernels:
            out = out * constant_kernel_diagonal(k)
        return jnp.asarray(out)
    raise ValueError("precomputed statistics need a kernel with a constant diagonal k(x, x) (a stationary "
                     f"kernel, or an Additive/Product of them), got {type(kernel).__name__}")


def _whiten(Kmm, X):
    """Rᵀ Kuu⁻¹ X. A :class:`~ppl_sparsegp.linalg.BlockDiag` of blocks with one pytree structure and
    shape (e.g. additive VFF) is whitened as one vmapped block: the block's own ``whiten``, with D
    times fewer operations to compile and no per-block slicing."""
    blocks = getattr(Kmm, "blocks", None)
    if isinstance(Kmm, BlockDiag) and len(blocks) > 1:
        structure = jax.tree.structure(blocks[0])
        shapes = [tuple(jnp.shape(leaf) for leaf in jax.tree.leaves(b)) for b in blocks]
        if all(jax.tree.structure(b) == structure for b in blocks) and len(set(shapes)) == 1:
            stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *blocks)
            Xs = X.reshape((len(blocks), blocks[0].size) + X.shape[1:])
            out = jax.vmap(lambda op, x: op.whiten(x))(stacked, Xs)
            return out.reshape((-1,) + X.shape[1:])
    return Kmm.whiten(X)


def _whitened_stats(Kmm, stats: SufficientStatistics):
    """WWᵀ = Rᵀ Kuu⁻¹ A Kuu⁻¹ R and W y = Rᵀ Kuu⁻¹ c."""
    half = _whiten(Kmm, stats.A)  # Rᵀ Kuu⁻¹ A, (M', M)
    WWt = _whiten(Kmm, half.T)  # Rᵀ Kuu⁻¹ (Rᵀ Kuu⁻¹ A)ᵀ
    WWt = 0.5 * (WWt + WWt.T)
    return WWt, _whiten(Kmm, stats.c)


def collapsed_elbo_from_stats(Kmm, stats: SufficientStatistics, sum_kff, noise_variance):
    """The collapsed bound from sufficient statistics in O(M³) (see the module docstring)."""
    s2 = noise_variance
    WWt, Wy = _whitened_stats(Kmm, stats)
    B = jnp.eye(WWt.shape[0], dtype=WWt.dtype) + WWt / s2
    LB = jnp.linalg.cholesky(B)
    e = solve_triangular(LB, Wy, lower=True)
    return (-0.5 * stats.n * jnp.log(2 * math.pi * s2) - jnp.sum(jnp.log(jnp.diag(LB)))
            - 0.5 * stats.yy / s2 + 0.5 * jnp.sum(e**2) / s2**2  # Eq. (30) [2]
            - 0.5 * sum_kff / s2 + 0.5 * jnp.trace(WWt) / s2)


def optimal_whitened_q(Kmm, stats: SufficientStatistics, noise_variance):
    r"""The optimal q(v) for u = R v: :math:`S_v = (I + WW^\top/\sigma^2)^{-1}`,
    :math:`\mathbf m_v = S_v W\mathbf y/\sigma^2` (eq. 29 of [2] with its missing Kuu⁻¹ restored).

    :returns: ``(m_v, S_v)`` with S_v a :class:`~ppl_sparsegp.linalg.Dense` operator.
    """
    WWt, Wy = _whitened_stats(Kmm, stats)
    B = jnp.eye(WWt.shape[0], dtype=WWt.dtype) + WWt / noise_variance
    LB = jnp.linalg.cholesky(B)
    m = cho_solve((LB, True), Wy) / noise_variance
    Linv = solve_triangular(LB, jnp.eye(B.shape[0], dtype=B.dtype), lower=True)
    return m, Dense(Linv.T @ Linv)


def _check_regression(X, y, noise_variance):
    X = check_inputs(X, "X")
    y = jnp.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be a vector of shape (N,), got shape {y.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    check_finite(y, "y")
    check_positive(noise_variance, "noise_variance")
    return X, y


def collapsed_elbo(feature, kernel, X, y, noise_variance):
    """The collapsed bound for any feature family (O(NM²)); see the module docstring."""
    X, y = _check_regression(X, y, noise_variance)
    X = feature.check_inputs(X)
    Kmm = Kuu(feature, kernel)
    stats = sufficient_statistics(Kuf(feature, kernel, X), y)
    return collapsed_elbo_from_stats(Kmm, stats, jnp.sum(kernel.diag(X)), noise_variance)


def exact_log_marginal_likelihood(kernel, X, y, noise_variance):
    r""":math:`\log\mathcal N(\mathbf y\mid 0, K_{ff} + \sigma^2 I)` by dense Cholesky (O(N³))."""
    X, y = _check_regression(X, y, noise_variance)
    K = Dense(kernel(X) + noise_variance * jnp.eye(X.shape[0], dtype=X.dtype))
    return -0.5 * (jnp.dot(y, K.solve(y)) + K.logdet() + X.shape[0] * math.log(2 * math.pi))
