"""Diagonal operators: :class:`Diagonal` (:math:`K = \\operatorname{diag}(d)`) and :class:`Identity`."""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .base import LinearOperator, _as_float, _bcast, _check_positive_diagonal, _check_rhs

__all__ = ["Diagonal", "Identity"]


class Diagonal(LinearOperator):
    """:math:`K = \\operatorname{diag}(d)`, :math:`d > 0`; :math:`R = \\operatorname{diag}(\\sqrt d)`.

    :param d: ``(n,)`` positive diagonal.
    """

    _params = ("d",)

    def __init__(self, d: ArrayLike):
        d = _as_float(d)
        if d.ndim != 1:
            raise ValueError(f"Diagonal: d must be 1-D, got shape {d.shape}")
        _check_positive_diagonal(d, "Diagonal")
        self._set(d=d)

    @property
    def size(self):
        return self.d.shape[-1]

    @property
    def dtype(self):
        return self.d.dtype

    def matmul(self, B: jax.Array) -> jax.Array:
        B = _check_rhs(self, B, self.size, "matmul")
        return _bcast(self.d, B) * B

    def solve(self, B: jax.Array) -> jax.Array:
        B = _check_rhs(self, B, self.size, "solve")
        return B / _bcast(self.d, B)

    def logdet(self):
        return jnp.sum(jnp.log(self.d))

    def diagonal(self):
        return self.d

    def sqrt(self):
        return jnp.diag(jnp.sqrt(self.d))

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        V = _check_rhs(self, V, self.size, "sqrt_matmul", "V")
        return _bcast(jnp.sqrt(self.d), V) * V

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        X = _check_rhs(self, X, self.size, "sqrt_rmatmul", "X")
        return _bcast(jnp.sqrt(self.d), X) * X

    def solve_sqrt(self, V: jax.Array) -> jax.Array:
        V = _check_rhs(self, V, self.size, "solve_sqrt", "V")
        return V / _bcast(jnp.sqrt(self.d), V)

    def whiten(self, B: jax.Array) -> jax.Array:
        """:math:`D^{1/2} D^{-1} B = D^{-1/2} B`."""
        B = _check_rhs(self, B, self.size, "whiten")
        return B / _bcast(jnp.sqrt(self.d), B)

    def trace_solve(self, S: LinearOperator) -> jax.Array:
        """:math:`\\operatorname{tr}(D^{-1} S) = \\sum_i S_{ii} / d_i`."""
        self._check_same_size(S, "trace_solve")
        return jnp.sum(S.diagonal() / self.d)

    def _inv_diagonal(self):
        return 1.0 / self.d

    def _diag_plus_factor(self, K):
        return self.d, None

    def to_dense(self):
        return jnp.diag(self.d)


class Identity(LinearOperator):
    """:math:`K = I_n`; every operation is free or :math:`O(n)`.

    :param n: size (static).
    :param dtype: floating dtype (default: JAX's default float, float64 when x64 is enabled).
    """

    _static = ("n", "_dtype")

    def __init__(self, n: int, dtype: Optional[DTypeLike] = None):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"Identity: n must be a positive int, got {n!r}")
        dtype = np.dtype(jnp.result_type(float) if dtype is None else dtype)
        self._set(n=int(n), _dtype=dtype)

    @property
    def size(self):
        return self.n

    @property
    def dtype(self):
        return self._dtype

    def matmul(self, B: jax.Array) -> jax.Array:
        return _check_rhs(self, B, self.n, "matmul")

    def solve(self, B: jax.Array) -> jax.Array:
        return _check_rhs(self, B, self.n, "solve")

    def logdet(self):
        return jnp.zeros((), dtype=self._dtype)

    def diagonal(self):
        return jnp.ones(self.n, dtype=self._dtype)

    def sqrt(self):
        return jnp.eye(self.n, dtype=self._dtype)

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        return _check_rhs(self, V, self.n, "sqrt_matmul", "V")

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        return _check_rhs(self, X, self.n, "sqrt_rmatmul", "X")

    def whiten(self, B: jax.Array) -> jax.Array:
        return _check_rhs(self, B, self.n, "whiten")

    def trace_solve(self, S: LinearOperator) -> jax.Array:
        """:math:`\\operatorname{tr}(S) = \\sum_i S_{ii}`."""
        self._check_same_size(S, "trace_solve")
        return jnp.sum(S.diagonal())

    def _inv_diagonal(self):
        return jnp.ones(self.n, dtype=self._dtype)

    def _diag_plus_factor(self, K):
        return jnp.ones(self.n, dtype=self._dtype), None

    def to_dense(self):
        return jnp.eye(self.n, dtype=self._dtype)
