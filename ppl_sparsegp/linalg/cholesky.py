"""Cholesky helpers for stacks of small blocks: a triangular inverse by recursive doubling and a
batched Cholesky factorisation whose reverse-mode rule uses only batched products.

Used by :class:`~ppl_sparsegp.linalg.StackedBlockDiag`, where one batched call replaces T small LAPACK
calls (which dominate on CPU for blocks of a few rows).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .base import _as_float

__all__ = ["triangular_inverse", "stacked_cholesky"]


def triangular_inverse(L: jax.Array) -> jax.Array:
    r"""The inverse of lower-triangular matrices L (..., m, m) by recursive doubling of diagonal blocks:

    .. math::

        \begin{pmatrix}A & 0\\ C & D\end{pmatrix}^{-1} =
        \begin{pmatrix}A^{-1} & 0\\ -D^{-1}CA^{-1} & D^{-1}\end{pmatrix},

    from the 1×1 blocks (reciprocals of the diagonal) up, all blocks of one size at once: log₂ m levels of
    batched products, no triangular solve. (On CPU a LAPACK ``trsm`` per small block costs tens of µs;
    this is several times faster for stacks of small blocks, forward and backward.) L is padded to a power
    of two with an identity block, whose inverse is itself. The error is that of the blocked triangular
    inversion (Higham, *Accuracy and Stability of Numerical Algorithms*, §14.2.2): :math:`\|L^{-1}L - I\|`
    of order :math:`\kappa(L)\,\epsilon`, like a triangular solve.
    """
    L = _as_float(L)
    m = L.shape[-1]
    n = 1 << max(m - 1, 0).bit_length()
    batch = L.shape[:-2]
    if n != m:  # blockdiag(L, I)⁻¹ = blockdiag(L⁻¹, I)
        L = jnp.pad(L, [(0, 0)] * len(batch) + [(0, n - m), (0, n - m)])
        L = L + jnp.diag(jnp.arange(n) >= m).astype(L.dtype)
    X = (1.0 / jnp.diagonal(L, axis1=-2, axis2=-1))[..., None, None]  # (..., n, 1, 1)
    b = 1
    while b < n:
        p = n // (2 * b)
        C = L.reshape(batch + (p, 2, b, p, 2, b))[..., :, 1, :, :, 0, :]  # (..., p, b, p, b)
        C = jnp.moveaxis(jnp.diagonal(C, axis1=-4, axis2=-2), -1, -3)  # the p sub-diagonal blocks (..., p, b, b)
        Xr = X.reshape(batch + (p, 2, b, b))
        Ai, Di = Xr[..., 0, :, :], Xr[..., 1, :, :]
        top = jnp.concatenate([Ai, jnp.zeros_like(Ai)], axis=-1)
        bottom = jnp.concatenate([-(Di @ (C @ Ai)), Di], axis=-1)
        X = jnp.concatenate([top, bottom], axis=-2)  # (..., p, 2b, 2b)
        b *= 2
    return X.reshape(batch + (n, n))[..., :m, :m]


@jax.custom_vjp
def stacked_cholesky(K: jax.Array) -> jax.Array:
    r"""Lower Cholesky factors of a stack of SPD matrices K (..., m, m) (the lower triangle is read, as
    ``jnp.linalg.cholesky`` reads the symmetrised input), with a reverse-mode rule made of batched products
    only: for :math:`K = LL^\top` and the cotangent :math:`\bar L`,

    .. math::

        \bar K = \operatorname{sym}\big(L^{-\top}\,\Phi(L^\top\bar L)\,L^{-1}\big),\qquad
        \Phi(X) = \operatorname{tril}(X) - \tfrac12\operatorname{diag}(X),

    the transpose of the forward rule :math:`\dot L = L\,\Phi(L^{-1}\dot K L^{-\top})` (Murray 2016,
    *Differentiation of the Cholesky decomposition*), with :math:`L^{-1}` from :func:`triangular_inverse`
    instead of two triangular solves.
    """
    return jnp.linalg.cholesky(K)


def _stacked_cholesky_fwd(K):
    L = jnp.linalg.cholesky(K)
    return L, L


def _phi(X):
    return jnp.tril(X) - 0.5 * jnp.diagonal(X, axis1=-2, axis2=-1)[..., None] * jnp.eye(X.shape[-1], dtype=X.dtype)


def _stacked_cholesky_bwd(L, L_bar):
    Li = triangular_inverse(L)
    Kb = jnp.swapaxes(Li, -1, -2) @ _phi(jnp.swapaxes(L, -1, -2) @ L_bar) @ Li
    return (0.5 * (Kb + jnp.swapaxes(Kb, -1, -2)),)


stacked_cholesky.defvjp(_stacked_cholesky_fwd, _stacked_cholesky_bwd)
