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

Numerics. :math:`WW^\top` is never formed as :math:`R^\top K_{uu}^{-1} A K_{uu}^{-1} R`: that squares
the condition number of Kuu, and with inducing points on a dense grid or long lengthscales it loses
positive definiteness (NaN) or exceeds the exact value. It is formed as :math:`GG^\top` from a square
root :math:`F` of A (:math:`A = FF^\top`), :math:`G = R^\top K_{uu}^{-1} F`: on data F is
:math:`K_{uf}` itself (so G = W, the textbook form), for precomputed statistics F comes from A's
eigendecomposition once (:meth:`SufficientStatistics.with_root`; accurate when Kuf is well conditioned,
as VFF's basis is: measured to 2e-13 against the data path; for inducing points keep the data path,
whose root is Kuf). Then B ⪰ I by construction, and the trace term
:math:`\sum_n k_{nn} - \|G\|_F^2 \ge 0` is clipped at zero, its exact sign. In float32 the Cholesky
factor of B comes from a QR factorisation of :math:`[G^\top/\sigma; I]` instead of from B itself.

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
    constant mean ``f1 = Kuf 1`` (M,) and ``ysum = Σ y`` (optional). They add over blocks of data.

    ``root`` (M, r), optional, is a square root of A (``A = root rootᵀ``), the form the bound is
    evaluated from (module docstring): Kuf itself on data, or :meth:`with_root` for precomputed A.
    A may then be None. On data ``y`` (N,) is kept too, so that W y is formed as G y, with the same
    rounding as G (not as Rᵀ Kuu⁻¹ c, which differs by Kuu's conditioning)."""

    A: jnp.ndarray | None
    c: jnp.ndarray
    yy: jnp.ndarray
    n: jnp.ndarray
    f1: jnp.ndarray | None = None
    ysum: jnp.ndarray | None = None
    root: jnp.ndarray | None = None
    y: jnp.ndarray | None = None

    @property
    def num_features(self) -> int:
        """M."""
        return int(jnp.shape(self.c)[0])

    def with_root(self) -> "SufficientStatistics":
        r"""These statistics with ``root`` = :math:`U\Lambda_+^{1/2}` from A's eigendecomposition
        :math:`A = U\Lambda U^\top` (eigenvalues clipped at 0: A is PSD, rounding can make the
        smallest slightly negative). O(M³), once: call it on precomputed statistics, not per step."""
        if self.root is not None:
            return self
        lam, U = jnp.linalg.eigh(0.5 * (self.A + self.A.T))
        return self._replace(root=U * jnp.sqrt(jnp.maximum(lam, 0.0)))

    def centred(self, mean):
        r"""The statistics of :math:`\mathbf y - \mu\mathbf 1` for a constant mean μ:
        :math:`\mathbf c - \mu\mathbf f_1`, :math:`\mathbf y^\top\mathbf y - 2\mu\sum y + \mu^2 N`,
        :math:`\sum y - \mu N` (A, f1 and N are unchanged)."""
        if self.f1 is None or self.ysum is None:
            raise ValueError("these SufficientStatistics have no f1 = Kuf·1 and ysum = Σy, so they cannot "
                             "be centred by a constant mean; compute them with sufficient_statistics or "
                             "fourier_statistics")
        return self._replace(c=self.c - mean * self.f1, yy=self.yy - 2 * mean * self.ysum + mean**2 * self.n,
                             ysum=self.ysum - mean * self.n, y=None if self.y is None else self.y - mean)


def sufficient_statistics(Kmn, y, *, keep_root: bool = False) -> SufficientStatistics:
    """The statistics of one block of data (they add over blocks). ``keep_root=True`` keeps Kuf as
    ``root`` and skips the O(NM²) product A (the form :func:`collapsed_elbo_from_stats` reads)."""
    A = None if keep_root else Kmn @ Kmn.T
    return SufficientStatistics(A, Kmn @ y, jnp.dot(y, y), jnp.asarray(y.shape[0], Kmn.dtype),
                                jnp.sum(Kmn, axis=1), jnp.sum(y), Kmn if keep_root else None,
                                y if keep_root else None)


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


def _whitened_stats(Kmm, stats: SufficientStatistics, noise_variance):
    """(L_B, ‖G‖²_F, W y) with G = Rᵀ Kuu⁻¹ F for a root F of A (module docstring), L_B the Cholesky
    factor of B = I + GGᵀ/σ² and W y = Rᵀ Kuu⁻¹ c. Nothing squares Kuu's condition number."""
    G = _whiten(Kmm, stats.with_root().root)  # (M', r)
    eye = jnp.eye(G.shape[0], dtype=G.dtype)
    if G.dtype == jnp.float32:
        # forming GGᵀ in float32 loses enough that the bound can exceed the exact value (measured:
        # +1.2e-2·|exact| for 200 inducing points, noise 1e-2): take L_B from the QR factor of
        # [Gᵀ/σ; I], whose RᵀR = B, at 2–4× the Gram's cost (so float64 keeps the Gram)
        R = jnp.linalg.qr(jnp.concatenate([G.T / jnp.sqrt(noise_variance), eye]), mode="r")
        LB = (R * jnp.sign(jnp.diagonal(R))[:, None]).T
    else:
        LB = jnp.linalg.cholesky(eye + (G @ G.T) / noise_variance)
    Wy = _whiten(Kmm, stats.c) if stats.y is None else G @ stats.y
    return LB, jnp.sum(G * G), Wy


def collapsed_elbo_from_stats(Kmm, stats: SufficientStatistics, sum_kff, noise_variance):
    """The collapsed bound from sufficient statistics in O(M³) (see the module docstring)."""
    s2 = noise_variance
    LB, trace_qff, Wy = _whitened_stats(Kmm, stats, s2)
    e = solve_triangular(LB, Wy, lower=True)
    return (-0.5 * stats.n * jnp.log(2 * math.pi * s2) - jnp.sum(jnp.log(jnp.diag(LB)))
            - 0.5 * stats.yy / s2 + 0.5 * jnp.sum(e**2) / s2**2  # Eq. (30) [2]
            - 0.5 * jnp.maximum(sum_kff - trace_qff, 0.0) / s2)  # tr(Kff − Qff) ≥ 0


def optimal_whitened_q(Kmm, stats: SufficientStatistics, noise_variance):
    r"""The optimal q(v) for u = R v: :math:`S_v = (I + WW^\top/\sigma^2)^{-1}`,
    :math:`\mathbf m_v = S_v W\mathbf y/\sigma^2` (eq. 29 of [2] with its missing Kuu⁻¹ restored).

    :returns: ``(m_v, S_v)`` with S_v a :class:`~ppl_sparsegp.linalg.Dense` operator.
    """
    LB, _, Wy = _whitened_stats(Kmm, stats, noise_variance)
    m = cho_solve((LB, True), Wy) / noise_variance
    Linv = solve_triangular(LB, jnp.eye(LB.shape[0], dtype=LB.dtype), lower=True)
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
    stats = sufficient_statistics(Kuf(feature, kernel, X), y, keep_root=True)
    return collapsed_elbo_from_stats(Kmm, stats, jnp.sum(kernel.diag(X)), noise_variance)


def exact_log_marginal_likelihood(kernel, X, y, noise_variance):
    r""":math:`\log\mathcal N(\mathbf y\mid 0, K_{ff} + \sigma^2 I)` by dense Cholesky (O(N³))."""
    X, y = _check_regression(X, y, noise_variance)
    K = Dense(kernel(X) + noise_variance * jnp.eye(X.shape[0], dtype=X.dtype))
    return -0.5 * (jnp.dot(y, K.solve(y)) + K.logdet() + X.shape[0] * math.log(2 * math.pi))
