"""The :class:`LinearOperator` base class and the helpers every structure shares.

The base defines the interface and the derived operations that stay structured for every structure
(``whiten`` and ``inv_quad`` through ``solve`` and ``sqrt_rmatmul``). An operation a structure does not
implement raises ``NotImplementedError`` naming the class and the operation; in particular the base
``trace_solve`` raises instead of forming the dense square-root factor of its argument.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..parameters import Module, check_value

__all__ = ["LinearOperator"]


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
def _as_float(x):
    """``x`` as an array of a floating dtype (integers promoted to the default float)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return x


def _bcast(v, X):
    """Reshape the 1-D ``v`` so that it scales the leading axis of ``X`` (``(n,)`` or ``(n, k)``)."""
    return v.reshape(v.shape + (1,) * (X.ndim - 1))


def _check_rhs(op, X, n, method, arg="B"):
    X = jnp.asarray(X)
    if X.ndim not in (1, 2) or X.shape[0] != n:
        raise ValueError(
            f"{type(op).__name__}.{method}: {arg} must have shape ({n},) or ({n}, k), got {X.shape}")
    return X


def _check_positive_diagonal(d, owner: str):
    """``d`` finite and > 0 (concrete; traced in debug mode), the error naming ``owner``'s d."""
    def problem(a):
        if not np.all(np.isfinite(a)):
            return f"{owner}: d contains NaN or inf"
        return None if np.all(a > 0) else f"{owner}: d must be > 0, got min {float(np.min(a))}"

    return check_value(d, problem)


def _all_finite(x) -> bool:
    return bool(np.all(np.isfinite(np.asarray(x))))


# --------------------------------------------------------------------------------------------------
# base class
# --------------------------------------------------------------------------------------------------
class LinearOperator(Module):
    """A symmetric positive-definite ``n x n`` matrix :math:`K` in structured form.

    Subclasses implement :meth:`matmul`, :meth:`solve`, :meth:`logdet`, :meth:`diagonal`,
    :meth:`sqrt_matmul`, :meth:`sqrt_rmatmul`, :meth:`sqrt`, :meth:`to_dense`, :meth:`trace_solve` and
    the properties :attr:`size`, :attr:`dtype`, :attr:`sqrt_cols`. The square-root factor :math:`R`
    satisfies :math:`R R^\\top = K` and has shape ``(n, sqrt_cols)``.
    """

    # -- shape ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """``n``."""
        raise NotImplementedError(f"{type(self).__name__} does not define size")

    @property
    def shape(self) -> tuple:
        """``(n, n)``."""
        return (self.size, self.size)

    @property
    def dtype(self):
        """The dtype of the operator's entries (each structure defines it)."""
        raise NotImplementedError(f"{type(self).__name__} does not define dtype")

    @property
    def sqrt_cols(self) -> int:
        """Number of columns ``n'`` of the square-root factor :math:`R` (``n x n'``); ``n`` for a square
        factor (a structure whose R is wider, e.g. diagonal + low rank, overrides it)."""
        return self.size

    # -- core operations ---------------------------------------------------------------------------
    def _unsupported(self, what):
        raise NotImplementedError(f"{type(self).__name__} does not implement {what}")

    def matmul(self, B: jax.Array) -> jax.Array:
        """:math:`K B` for ``B`` of shape ``(n,)`` or ``(n, k)``."""
        self._unsupported("matmul")

    def __matmul__(self, B):
        return self.matmul(B)

    def solve(self, B: jax.Array) -> jax.Array:
        """:math:`K^{-1} B` for ``B`` of shape ``(n,)`` or ``(n, k)``."""
        self._unsupported("solve")

    def logdet(self):
        """:math:`\\log |K|`."""
        self._unsupported("logdet")

    def diagonal(self):
        """:math:`\\operatorname{diag}(K)`, shape ``(n,)``."""
        self._unsupported("diagonal")

    def sqrt(self):
        """The dense square-root factor :math:`R` (``n x sqrt_cols``), :math:`R R^\\top = K`.

        Densifying: meant for tests and small problems.
        """
        self._unsupported("sqrt")

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        """:math:`R V` for ``V`` of shape ``(n',)`` or ``(n', k)`` (structured)."""
        self._unsupported("sqrt_matmul")

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        """:math:`R^\\top X` for ``X`` of shape ``(n,)`` or ``(n, k)`` (structured)."""
        self._unsupported("sqrt_rmatmul")

    def to_dense(self):
        """The dense matrix :math:`K` (densifying: meant for tests)."""
        self._unsupported("to_dense")

    def trace_solve(self, S: "LinearOperator"):
        """:math:`\\operatorname{tr}(K^{-1} S)` for another operator ``S`` of the same size.

        Every structure implements its own; the base raises ``NotImplementedError`` (the general rule
        :math:`\\operatorname{tr}(R_S^\\top K^{-1} R_S)` would form the dense factor of ``S``). A structure
        with no pairwise rule for ``S`` uses :meth:`_trace_solve_by_parts`.
        """
        self._unsupported(f"trace_solve (S: {type(S).__name__})")

    # -- derived operations ------------------------------------------------------------------------
    def whiten(self, B: jax.Array) -> jax.Array:
        """:math:`R^\\top K^{-1} B`, shape ``(n', ...)``.

        If :math:`B = K a`, then ``whiten(B)`` :math:`= R^\\top a`, and
        :math:`\\|R^\\top K^{-1} b\\|^2 = b^\\top K^{-1} b`.
        """
        return self.sqrt_rmatmul(self.solve(B))

    def solve_sqrt(self, V: jax.Array) -> jax.Array:
        """:math:`K^{-1} R V` for ``V`` of shape ``(n',)`` or ``(n', k)``: the weights of whitened inducing
        variables (:math:`u = R v`, so :math:`K_{fu}K^{-1}u = K_{fu}` ``solve_sqrt(v)``); for a square R
        it is :math:`R^{-\\top} V`, and a structure with a cheaper form than ``solve(sqrt_matmul(V))``
        overrides it."""
        return self.solve(self.sqrt_matmul(V))

    def inv_quad(self, b: jax.Array) -> jax.Array:
        """:math:`b^\\top K^{-1} b` (a scalar for ``b`` of shape ``(n,)``, per column for ``(n, k)``)."""
        b = _check_rhs(self, b, self.size, "inv_quad", "b")
        return jnp.sum(b * self.solve(b), axis=0)

    # -- support for trace_solve -------------------------------------------------------------------
    def _inv_diagonal(self):
        """:math:`\\operatorname{diag}(K^{-1})`, shape ``(n,)``: :meth:`_trace_solve_by_parts` with a
        diagonal part of ``S``."""
        self._unsupported("the diagonal of its inverse (needed by trace_solve with a diagonal S)")

    def _diag_plus_factor(self, K: "LinearOperator"):
        """``(s, R)`` with ``self`` :math:`= \\operatorname{diag}(s) + R R^\\top` as held (``s`` of shape
        ``(n,)`` or None, ``R`` a stored ``(n, r)`` factor or None; nothing formed): the form in which
        :meth:`_trace_solve_by_parts` takes ``S``. The base raises: ``K`` (the operator asking) has no rule
        for an ``S`` of this structure."""
        raise NotImplementedError(
            f"{type(K).__name__} does not implement trace_solve (S: {type(self).__name__}): "
            f"{type(self).__name__} is not held as diagonal plus a stored factor, and "
            f"{type(K).__name__} has no rule for this pair")

    def _trace_solve_factor(self, R):
        """:math:`\\operatorname{tr}(K^{-1} R R^\\top) = \\sum_{ij} (K^{-1} R)_{ij} R_{ij}` for a stored
        factor ``R`` (``r`` solves with ``K``)."""
        return jnp.sum(self.solve(R) * R)

    def _trace_solve_by_parts(self, S):
        """:math:`\\operatorname{tr}(K^{-1} S)` for ``S`` held as :math:`\\operatorname{diag}(s) + R R^\\top`
        (``S._diag_plus_factor``: Dense, Diagonal, Identity, DiagPlusLowRank):
        :math:`s^\\top \\operatorname{diag}(K^{-1}) + \\operatorname{tr}(R^\\top K^{-1} R)`, with no
        ``n x n`` matrix beyond ``S``'s own factor. Any other ``S`` raises ``NotImplementedError``."""
        self._check_same_size(S, "trace_solve")
        s, R = S._diag_plus_factor(self)
        out = None if R is None else self._trace_solve_factor(R)
        if s is not None:
            t = jnp.sum(s * self._inv_diagonal())
            out = t if out is None else t + out
        return out

    def _check_same_size(self, S, method):
        if not isinstance(S, LinearOperator):
            raise ValueError(f"{type(self).__name__}.{method}: S must be a LinearOperator, got "
                             f"{type(S).__name__}")
        if S.size != self.size:
            raise ValueError(f"{type(self).__name__}.{method}: S must have size {self.size}, "
                             f"got {S.size}")
