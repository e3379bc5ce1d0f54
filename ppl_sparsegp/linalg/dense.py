"""Dense blocks: :class:`Dense` (one SPD matrix with its Cholesky factor) and :class:`StackedBlockDiag`
(T equal-size dense blocks held as stacked arrays, every operation one batched call)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import block_diag, cho_solve, solve_triangular
from jax.typing import ArrayLike

from ..parameters import check_finite, check_value, is_concrete
from .base import LinearOperator, _all_finite, _as_float, _check_rhs
from .cholesky import stacked_cholesky, triangular_inverse
from .structured import BlockDiag

__all__ = ["Dense", "StackedBlockDiag"]


class Dense(LinearOperator):
    """A dense SPD matrix held with its lower Cholesky factor :math:`L`, :math:`K = L L^\\top`.

    :param matrix: ``(n, n)`` symmetric positive-definite matrix (only its lower triangle is read
        by the factorisation).
    :param jitter: added to the diagonal before factorising; the stored ``matrix`` includes it.
    :raises numpy.linalg.LinAlgError: if the Cholesky factorisation of a concrete matrix fails.
    """

    _params = ("matrix", "chol")

    def __init__(self, matrix: ArrayLike, jitter: ArrayLike = 0.0):
        matrix = _as_float(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"Dense: matrix must be a square 2-D array, got shape {matrix.shape}")
        check_finite(matrix, "Dense: matrix")
        if is_concrete(jitter) and not (_all_finite(jitter) and bool(np.all(np.asarray(jitter) >= 0))):
            raise ValueError(f"Dense: jitter must be finite and >= 0, got {jitter!r}")
        n = matrix.shape[0]
        if not (isinstance(jitter, (int, float)) and jitter == 0):
            matrix = matrix + jitter * jnp.eye(n, dtype=matrix.dtype)
        chol = jnp.linalg.cholesky(matrix)
        message = (f"Dense: matrix ({n}x{n}) is not positive definite (Cholesky failed); "
                   f"pass a larger jitter= (e.g. 1e-6 times the mean diagonal) or check the matrix")
        if not is_concrete(chol):
            check_value(chol, lambda a: None if np.all(np.isfinite(a)) else message)  # traced: debug mode
        elif not _all_finite(chol):
            raise np.linalg.LinAlgError(message)
        self._set(matrix=matrix, chol=chol)

    @classmethod
    def from_cholesky(cls, L: jax.Array) -> "Dense":
        """Build from a lower-triangular factor :math:`L` (no factorisation): :math:`K = L L^\\top`."""
        L = _as_float(L)
        if L.ndim != 2 or L.shape[0] != L.shape[1]:
            raise ValueError(f"Dense.from_cholesky: L must be a square 2-D array, got shape {L.shape}")
        if is_concrete(L) and not _all_finite(L):
            raise ValueError("Dense.from_cholesky: L contains NaN or inf")
        obj = object.__new__(cls)
        obj._set(matrix=L @ L.T, chol=L)
        return obj

    @property
    def size(self):
        return self.chol.shape[-1]

    @property
    def dtype(self):
        return self.chol.dtype

    def matmul(self, B: jax.Array) -> jax.Array:
        B = _check_rhs(self, B, self.size, "matmul")
        return self.matrix @ B

    def solve(self, B: jax.Array) -> jax.Array:
        """:math:`K^{-1} B = L^{-\\top} L^{-1} B`."""
        B = _check_rhs(self, B, self.size, "solve")
        return cho_solve((self.chol, True), B)

    def logdet(self):
        """:math:`\\log|K| = 2 \\sum_i \\log L_{ii}`."""
        return 2.0 * jnp.sum(jnp.log(jnp.diagonal(self.chol)))

    def diagonal(self):
        return jnp.diagonal(self.matrix)

    def sqrt(self):
        return self.chol

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        V = _check_rhs(self, V, self.size, "sqrt_matmul", "V")
        return self.chol @ V

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        X = _check_rhs(self, X, self.size, "sqrt_rmatmul", "X")
        return self.chol.T @ X

    def solve_sqrt(self, V: jax.Array) -> jax.Array:
        """:math:`K^{-1} L V = L^{-\\top} V` (one triangular solve)."""
        V = _check_rhs(self, V, self.size, "solve_sqrt", "V")
        return solve_triangular(self.chol, V, lower=True, trans="T")

    def whiten(self, B: jax.Array) -> jax.Array:
        """:math:`R^\\top K^{-1} B = L^{-1} B` (one triangular solve)."""
        B = _check_rhs(self, B, self.size, "whiten")
        return solve_triangular(self.chol, B, lower=True)

    def inv_quad(self, b: jax.Array) -> jax.Array:
        """:math:`b^\\top K^{-1} b = \\|L^{-1} b\\|^2`."""
        b = _check_rhs(self, b, self.size, "inv_quad", "b")
        return jnp.sum(self.whiten(b) ** 2, axis=0)

    def trace_solve(self, S: LinearOperator) -> jax.Array:
        """:math:`\\operatorname{tr}(K^{-1} S) = \\|L^{-1} R_S\\|_F^2` (``L`` square, so exact), with ``S``'s
        dense factor ``S.sqrt()``: K is dense, so this costs no more than K's own solves."""
        self._check_same_size(S, "trace_solve")
        return jnp.sum(self.whiten(S.sqrt()) ** 2)

    def _inv_diagonal(self):
        """:math:`\\operatorname{diag}(K^{-1})_i = \\sum_k (L^{-1})_{ki}^2`."""
        Li = solve_triangular(self.chol, jnp.eye(self.size, dtype=self.dtype), lower=True)
        return jnp.sum(Li**2, axis=0)

    def _diag_plus_factor(self, K):
        return None, self.chol

    def to_dense(self):
        return self.matrix


# --------------------------------------------------------------------------------------------------
# stacked dense blocks
# --------------------------------------------------------------------------------------------------
class StackedBlockDiag(BlockDiag):
    """:math:`K = \\operatorname{blockdiag}(K_1, \\dots, K_T)` of T dense ``m x m`` blocks held as stacked
    ``(T, m, m)`` arrays with their lower Cholesky factors, :math:`K_t = L_t L_t^\\top`.

    The same matrix as a :class:`BlockDiag` of :class:`Dense` blocks, but every operation is one batched
    call (one batched Cholesky, one batched triangular solve, one batched product) instead of T separate
    ones, so the number of operations to compile and run does not grow with T. ``blocks`` gives the
    :class:`Dense` blocks (views of the stacked arrays) for code that walks them.

    :param matrix: ``(T, m, m)`` symmetric positive-definite blocks.
    :param jitter: added to every block's diagonal before factorising (a scalar).
    :raises numpy.linalg.LinAlgError: if the Cholesky factorisation of a concrete block fails.
    """

    _params = ("matrix", "chol")

    def __init__(self, matrix: ArrayLike, jitter: ArrayLike = 0.0):
        matrix = _as_float(matrix)
        if matrix.ndim != 3 or matrix.shape[1] != matrix.shape[2] or matrix.shape[0] < 1:
            raise ValueError(f"StackedBlockDiag: matrix must have shape (T, m, m), got {matrix.shape}")
        if is_concrete(matrix) and not _all_finite(matrix):
            raise ValueError("StackedBlockDiag: matrix contains NaN or inf")
        if is_concrete(jitter) and not (_all_finite(jitter) and bool(np.all(np.asarray(jitter) >= 0))):
            raise ValueError(f"StackedBlockDiag: jitter must be finite and >= 0, got {jitter!r}")
        if not (isinstance(jitter, (int, float)) and jitter == 0):
            matrix = matrix + jitter * jnp.eye(matrix.shape[-1], dtype=matrix.dtype)
        chol = stacked_cholesky(matrix)
        if is_concrete(matrix) and not _all_finite(chol):
            raise np.linalg.LinAlgError(
                f"StackedBlockDiag: a block ({matrix.shape[-1]}x{matrix.shape[-1]}) is not positive definite "
                "(Cholesky failed); pass a larger jitter= or check the blocks")
        self._set(matrix=matrix, chol=chol)

    @classmethod
    def from_cholesky(cls, L: jax.Array) -> "StackedBlockDiag":
        """Build from lower-triangular factors ``L`` of shape ``(T, m, m)`` (no factorisation)."""
        L = _as_float(L)
        if L.ndim != 3 or L.shape[1] != L.shape[2] or L.shape[0] < 1:
            raise ValueError(f"StackedBlockDiag.from_cholesky: L must have shape (T, m, m), got {L.shape}")
        if is_concrete(L) and not _all_finite(L):
            raise ValueError("StackedBlockDiag.from_cholesky: L contains NaN or inf")
        obj = object.__new__(cls)
        obj._set(matrix=L @ jnp.swapaxes(L, -1, -2), chol=L)
        return obj

    @property
    def num_blocks(self) -> int:
        return self.chol.shape[0]

    @property
    def blocks(self) -> tuple:
        """The T blocks as :class:`Dense` operators (views; no factorisation)."""
        out = []
        for t in range(self.num_blocks):
            b = object.__new__(Dense)
            b._set(matrix=self.matrix[t], chol=self.chol[t])
            out.append(b)
        return tuple(out)

    @property
    def block_sizes(self):
        return (self.chol.shape[-1],) * self.num_blocks

    @property
    def size(self):
        return self.num_blocks * self.chol.shape[-1]

    @property
    def dtype(self):
        return self.chol.dtype

    def _batched(self, fn, X, method, arg):
        """Apply ``fn`` to X reshaped to (T, m, k) and flatten back to X's shape."""
        X = _check_rhs(self, X, self.size, method, arg)
        Y = fn(X.reshape(self.num_blocks, self.chol.shape[-1], -1))
        return Y.reshape(X.shape)

    def matmul(self, B: jax.Array) -> jax.Array:
        return self._batched(lambda Y: self.matrix @ Y, B, "matmul", "B")

    def inverse_factor(self):
        """:math:`L_t^{-1}`, shape ``(T, m, m)``, by :func:`triangular_inverse` (batched products only)."""
        return triangular_inverse(self.chol)

    def _whiten_stacked(self, Y):
        # many right-hand sides: L⁻¹ once (m columns) and a batched product, several times faster than
        # a triangular solve with k > m columns on CPU, forward and backward; few: the solve itself
        if Y.shape[-1] > Y.shape[-2]:
            return self.inverse_factor() @ Y
        return solve_triangular(self.chol, Y, lower=True)

    def solve(self, B: jax.Array) -> jax.Array:
        """:math:`K_t^{-1} B_t = L_t^{-\\top} (L_t^{-1} B_t)`, batched over the blocks."""
        def fn(Y):
            if Y.shape[-1] > Y.shape[-2]:
                Li = self.inverse_factor()
                return jnp.swapaxes(Li, -1, -2) @ (Li @ Y)
            return cho_solve((self.chol, True), Y)
        return self._batched(fn, B, "solve", "B")

    def whiten(self, B: jax.Array) -> jax.Array:
        """:math:`L_t^{-1} B_t`, batched over the blocks (through :meth:`inverse_factor` when B has more
        columns than a block has rows)."""
        return self._batched(self._whiten_stacked, B, "whiten", "B")

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        return self._batched(lambda Y: self.chol @ Y, V, "sqrt_matmul", "V")

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        return self._batched(lambda Y: jnp.swapaxes(self.chol, -1, -2) @ Y, X, "sqrt_rmatmul", "X")

    def inv_quad(self, b: jax.Array) -> jax.Array:
        b = _check_rhs(self, b, self.size, "inv_quad", "b")
        return jnp.sum(self.whiten(b) ** 2, axis=0)

    def logdet(self):
        return 2.0 * jnp.sum(jnp.log(jnp.diagonal(self.chol, axis1=-2, axis2=-1)))

    def diagonal(self):
        """:math:`\\operatorname{diag}(L_t L_t^\\top) = \\sum_j L_{t,ij}^2` (no product of the factors)."""
        return jnp.sum(self.chol**2, axis=-1).reshape(-1)

    def trace_solve(self, S: LinearOperator) -> jax.Array:
        """:math:`\\sum_t \\|L_t^{-1} R_{S,t}\\|_F^2` in one batched solve when ``S`` is a
        :class:`StackedBlockDiag` of the same shape; otherwise as :meth:`BlockDiag.trace_solve` (blockwise
        for a :class:`BlockDiag` of the same block sizes, else by parts of ``S``)."""
        self._check_same_size(S, "trace_solve")
        if isinstance(S, StackedBlockDiag) and S.chol.shape == self.chol.shape:
            return jnp.sum(solve_triangular(self.chol, S.chol, lower=True) ** 2)
        return super().trace_solve(S)

    def _inv_diagonal(self):
        """:math:`\\operatorname{diag}(K_t^{-1})_i = \\sum_k (L_t^{-1})_{ki}^2`, batched over the blocks."""
        return jnp.sum(self.inverse_factor() ** 2, axis=-2).reshape(-1)

    def sqrt(self):
        return block_diag(*[self.chol[t] for t in range(self.num_blocks)])

    def to_dense(self):
        return block_diag(*[self.matrix[t] for t in range(self.num_blocks)])
