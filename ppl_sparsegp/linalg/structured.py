"""Structured symmetric positive-definite operators.

Every operator here represents a symmetric positive-(semi)definite ``n x n`` matrix :math:`K` without
storing it densely. Operators are immutable pytrees (:class:`~ppl_sparsegp.parameters.Module`), so they pass
through ``jax.jit``, ``jax.vmap`` and ``jax.grad``; validation of constructor arguments runs only on
concrete (non-traced) values.

Each operator provides ``matmul``, ``solve``, ``logdet``, ``diagonal``, ``inv_quad``, ``trace_solve`` and
a square-root factor :math:`R` with :math:`R R^\\top = K`, which may be non-square (``n x n'`` with
``n' = sqrt_cols``), used through ``sqrt_matmul`` (:math:`R V`), ``sqrt_rmatmul`` (:math:`R^\\top X`)
and ``whiten`` (:math:`R^\\top K^{-1} B`). Only :meth:`LinearOperator.to_dense` and
:meth:`LinearOperator.sqrt` form dense matrices; an operation a structure cannot do fast raises
``NotImplementedError`` instead of densifying silently.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import block_diag, cho_solve, solve_triangular

from .parameters import Module, is_concrete

__all__ = [
    "LinearOperator",
    "Dense",
    "Diagonal",
    "Identity",
    "DiagPlusLowRank",
    "BlockDiag",
    "StackedBlockDiag",
    "Kronecker",
]


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


def _all_finite(x) -> bool:
    return bool(np.all(np.isfinite(np.asarray(x))))


def _split(X, sizes):
    """Split the leading axis of ``X`` into consecutive pieces of the given (static) sizes."""
    out, start = [], 0
    for s in sizes:
        out.append(X[start:start + s])
        start += s
    return out


def _kron_apply(maps, in_sizes, X):
    """Apply :math:`(A_1 \\otimes \\dots \\otimes A_d)` to ``X`` without forming the product.

    With ``jnp.kron`` ordering (first factor varies slowest), row index ``i`` of ``X`` is the C-order
    flattening of ``(i_1, ..., i_d)``; reshaping to ``(n_1, ..., n_d, k)`` and applying :math:`A_j`
    along axis ``j`` for every ``j`` gives :math:`(\\otimes_j A_j) X`.

    :param maps: one callable per factor, mapping an array ``(in_j, m)`` to ``(out_j, m)``.
    :param in_sizes: the input size ``in_j`` of every factor; ``X.shape[0] == prod(in_sizes)``.
    :param X: ``(prod(in_sizes),)`` or ``(prod(in_sizes), k)``.
    :returns: ``(prod(out_sizes),)`` or ``(prod(out_sizes), k)``.
    """
    X = jnp.asarray(X)
    vec = X.ndim == 1
    if vec:
        X = X[:, None]
    k = X.shape[1]
    Y = X.reshape(tuple(in_sizes) + (k,))
    for axis, f in enumerate(maps):
        Y = jnp.moveaxis(Y, axis, 0)
        rest = Y.shape[1:]
        Z = f(Y.reshape(Y.shape[0], math.prod(rest)))
        Y = jnp.moveaxis(Z.reshape((Z.shape[0],) + rest), 0, axis)
    out = Y.reshape(math.prod(Y.shape[:-1]), k)
    return out[:, 0] if vec else out


# --------------------------------------------------------------------------------------------------
# base class
# --------------------------------------------------------------------------------------------------
class LinearOperator(Module):
    """A symmetric positive-definite ``n x n`` matrix :math:`K` in structured form.

    Subclasses implement :meth:`matmul`, :meth:`solve`, :meth:`logdet`, :meth:`diagonal`,
    :meth:`sqrt_matmul`, :meth:`sqrt_rmatmul`, :meth:`sqrt`, :meth:`to_dense` and the properties
    :attr:`size`, :attr:`dtype`, :attr:`sqrt_cols`. The square-root factor :math:`R` satisfies
    :math:`R R^\\top = K` and has shape ``(n, sqrt_cols)``.
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
        raise NotImplementedError(f"{type(self).__name__} does not define dtype")

    @property
    def sqrt_cols(self) -> int:
        """Number of columns ``n'`` of the square-root factor :math:`R` (``n x n'``)."""
        raise NotImplementedError(f"{type(self).__name__} does not define sqrt_cols")

    # -- core operations ---------------------------------------------------------------------------
    def _unsupported(self, what):
        raise NotImplementedError(f"{type(self).__name__} does not implement {what}")

    def matmul(self, B):
        """:math:`K B` for ``B`` of shape ``(n,)`` or ``(n, k)``."""
        self._unsupported("matmul")

    def __matmul__(self, B):
        return self.matmul(B)

    def solve(self, B):
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

    def sqrt_matmul(self, V):
        """:math:`R V` for ``V`` of shape ``(n',)`` or ``(n', k)`` (structured)."""
        self._unsupported("sqrt_matmul")

    def sqrt_rmatmul(self, X):
        """:math:`R^\\top X` for ``X`` of shape ``(n,)`` or ``(n, k)`` (structured)."""
        self._unsupported("sqrt_rmatmul")

    def to_dense(self):
        """The dense matrix :math:`K` (densifying: meant for tests)."""
        self._unsupported("to_dense")

    # -- derived operations ------------------------------------------------------------------------
    def whiten(self, B):
        """:math:`R^\\top K^{-1} B`, shape ``(n', ...)``.

        If :math:`B = K a`, then ``whiten(B)`` :math:`= R^\\top a`, and
        :math:`\\|R^\\top K^{-1} b\\|^2 = b^\\top K^{-1} b`.
        """
        return self.sqrt_rmatmul(self.solve(B))

    def inv_quad(self, b):
        """:math:`b^\\top K^{-1} b` (a scalar for ``b`` of shape ``(n,)``, per column for ``(n, k)``)."""
        b = _check_rhs(self, b, self.size, "inv_quad", "b")
        return jnp.sum(b * self.solve(b), axis=0)

    def trace_solve(self, S: "LinearOperator"):
        """:math:`\\operatorname{tr}(K^{-1} S)` for another operator ``S`` of the same size.

        General case: :math:`\\operatorname{tr}(K^{-1} S) = \\operatorname{tr}(R_S^\\top K^{-1} R_S)`
        with ``S.sqrt()`` (which forms the dense factor of ``S``). Subclasses add fast paths.
        """
        self._check_same_size(S, "trace_solve")
        RS = S.sqrt()
        return jnp.sum(self.solve(RS) * RS)

    def _check_same_size(self, S, method):
        if not isinstance(S, LinearOperator):
            raise ValueError(f"{type(self).__name__}.{method}: S must be a LinearOperator, got "
                             f"{type(S).__name__}")
        if S.size != self.size:
            raise ValueError(f"{type(self).__name__}.{method}: S must have size {self.size}, "
                             f"got {S.size}")


# --------------------------------------------------------------------------------------------------
# Dense
# --------------------------------------------------------------------------------------------------
class Dense(LinearOperator):
    """A dense SPD matrix held with its lower Cholesky factor :math:`L`, :math:`K = L L^\\top`.

    :param matrix: ``(n, n)`` symmetric positive-definite matrix (only its lower triangle is read
        by the factorisation).
    :param jitter: added to the diagonal before factorising; the stored ``matrix`` includes it.
    :raises numpy.linalg.LinAlgError: if the Cholesky factorisation of a concrete matrix fails.
    """

    _params = ("matrix", "chol")

    def __init__(self, matrix, jitter=0.0):
        matrix = _as_float(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"Dense: matrix must be a square 2-D array, got shape {matrix.shape}")
        if is_concrete(matrix) and not _all_finite(matrix):
            raise ValueError("Dense: matrix contains NaN or inf")
        if is_concrete(jitter) and not (_all_finite(jitter) and bool(np.all(np.asarray(jitter) >= 0))):
            raise ValueError(f"Dense: jitter must be finite and >= 0, got {jitter!r}")
        n = matrix.shape[0]
        if not (isinstance(jitter, (int, float)) and jitter == 0):
            matrix = matrix + jitter * jnp.eye(n, dtype=matrix.dtype)
        chol = jnp.linalg.cholesky(matrix)
        if is_concrete(matrix) and not _all_finite(chol):
            raise np.linalg.LinAlgError(
                f"Dense: matrix ({n}x{n}) is not positive definite (Cholesky failed); "
                f"pass a larger jitter= (e.g. 1e-6 times the mean diagonal) or check the matrix")
        self._set(matrix=matrix, chol=chol)

    @classmethod
    def from_cholesky(cls, L) -> "Dense":
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

    @property
    def sqrt_cols(self):
        return self.size

    def matmul(self, B):
        B = _check_rhs(self, B, self.size, "matmul")
        return self.matrix @ B

    def solve(self, B):
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

    def sqrt_matmul(self, V):
        V = _check_rhs(self, V, self.size, "sqrt_matmul", "V")
        return self.chol @ V

    def sqrt_rmatmul(self, X):
        X = _check_rhs(self, X, self.size, "sqrt_rmatmul", "X")
        return self.chol.T @ X

    def whiten(self, B):
        """:math:`R^\\top K^{-1} B = L^{-1} B` (one triangular solve)."""
        B = _check_rhs(self, B, self.size, "whiten")
        return solve_triangular(self.chol, B, lower=True)

    def inv_quad(self, b):
        """:math:`b^\\top K^{-1} b = \\|L^{-1} b\\|^2`."""
        b = _check_rhs(self, b, self.size, "inv_quad", "b")
        return jnp.sum(self.whiten(b) ** 2, axis=0)

    def trace_solve(self, S):
        """:math:`\\operatorname{tr}(K^{-1} S) = \\|L^{-1} R_S\\|_F^2` (``L`` square, so exact)."""
        self._check_same_size(S, "trace_solve")
        return jnp.sum(self.whiten(S.sqrt()) ** 2)

    def to_dense(self):
        return self.matrix


# --------------------------------------------------------------------------------------------------
# Diagonal and Identity
# --------------------------------------------------------------------------------------------------
class Diagonal(LinearOperator):
    """:math:`K = \\operatorname{diag}(d)`, :math:`d > 0`; :math:`R = \\operatorname{diag}(\\sqrt d)`.

    :param d: ``(n,)`` positive diagonal.
    """

    _params = ("d",)

    def __init__(self, d):
        d = _as_float(d)
        if d.ndim != 1:
            raise ValueError(f"Diagonal: d must be 1-D, got shape {d.shape}")
        if is_concrete(d):
            if not _all_finite(d):
                raise ValueError("Diagonal: d contains NaN or inf")
            if not bool(np.all(np.asarray(d) > 0)):
                raise ValueError(f"Diagonal: d must be > 0, got min {float(np.min(np.asarray(d)))}")
        self._set(d=d)

    @property
    def size(self):
        return self.d.shape[-1]

    @property
    def dtype(self):
        return self.d.dtype

    @property
    def sqrt_cols(self):
        return self.size

    def matmul(self, B):
        B = _check_rhs(self, B, self.size, "matmul")
        return _bcast(self.d, B) * B

    def solve(self, B):
        B = _check_rhs(self, B, self.size, "solve")
        return B / _bcast(self.d, B)

    def logdet(self):
        return jnp.sum(jnp.log(self.d))

    def diagonal(self):
        return self.d

    def sqrt(self):
        return jnp.diag(jnp.sqrt(self.d))

    def sqrt_matmul(self, V):
        V = _check_rhs(self, V, self.size, "sqrt_matmul", "V")
        return _bcast(jnp.sqrt(self.d), V) * V

    def sqrt_rmatmul(self, X):
        X = _check_rhs(self, X, self.size, "sqrt_rmatmul", "X")
        return _bcast(jnp.sqrt(self.d), X) * X

    def whiten(self, B):
        """:math:`D^{1/2} D^{-1} B = D^{-1/2} B`."""
        B = _check_rhs(self, B, self.size, "whiten")
        return B / _bcast(jnp.sqrt(self.d), B)

    def trace_solve(self, S):
        """:math:`\\operatorname{tr}(D^{-1} S) = \\sum_i S_{ii} / d_i`."""
        self._check_same_size(S, "trace_solve")
        return jnp.sum(S.diagonal() / self.d)

    def to_dense(self):
        return jnp.diag(self.d)


class Identity(LinearOperator):
    """:math:`K = I_n`; every operation is free or :math:`O(n)`.

    :param n: size (static).
    :param dtype: floating dtype (default: JAX's default float, float64 when x64 is enabled).
    """

    _static = ("n", "_dtype")

    def __init__(self, n: int, dtype=None):
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

    @property
    def sqrt_cols(self):
        return self.n

    def matmul(self, B):
        return _check_rhs(self, B, self.n, "matmul")

    def solve(self, B):
        return _check_rhs(self, B, self.n, "solve")

    def logdet(self):
        return jnp.zeros((), dtype=self._dtype)

    def diagonal(self):
        return jnp.ones(self.n, dtype=self._dtype)

    def sqrt(self):
        return jnp.eye(self.n, dtype=self._dtype)

    def sqrt_matmul(self, V):
        return _check_rhs(self, V, self.n, "sqrt_matmul", "V")

    def sqrt_rmatmul(self, X):
        return _check_rhs(self, X, self.n, "sqrt_rmatmul", "X")

    def whiten(self, B):
        return _check_rhs(self, B, self.n, "whiten")

    def trace_solve(self, S):
        """:math:`\\operatorname{tr}(S) = \\sum_i S_{ii}`."""
        self._check_same_size(S, "trace_solve")
        return jnp.sum(S.diagonal())

    def to_dense(self):
        return jnp.eye(self.n, dtype=self._dtype)


# --------------------------------------------------------------------------------------------------
# diagonal plus low rank
# --------------------------------------------------------------------------------------------------
class DiagPlusLowRank(LinearOperator):
    """:math:`K = D + B B^\\top` with :math:`D = \\operatorname{diag}(d)`, ``B`` of shape ``(n, r)``.

    With the capacitance :math:`C = I_r + B^\\top D^{-1} B`:

    * Woodbury: :math:`K^{-1} = D^{-1} - D^{-1} B C^{-1} B^\\top D^{-1}`;
    * determinant lemma: :math:`\\log|K| = \\sum_i \\log d_i + \\log|C|`;
    * square root :math:`R = [D^{1/2}, B]` of shape ``(n, n + r)``.

    Every operation costs :math:`O(n r^2)` or less; no ``n x n`` matrix is formed except in
    :meth:`to_dense` and :meth:`sqrt`.

    :param d: ``(n,)`` positive diagonal.
    :param B: ``(n, r)`` low-rank factor.
    """

    _params = ("d", "B")

    def __init__(self, d, B):
        d, B = _as_float(d), _as_float(B)
        if d.ndim != 1:
            raise ValueError(f"DiagPlusLowRank: d must be 1-D, got shape {d.shape}")
        if B.ndim != 2:
            raise ValueError(f"DiagPlusLowRank: B must be 2-D (n, r), got shape {B.shape}")
        if B.shape[0] != d.shape[0]:
            raise ValueError(f"DiagPlusLowRank: B must have {d.shape[0]} rows to match d, "
                             f"got B of shape {B.shape}")
        if is_concrete(d):
            if not _all_finite(d):
                raise ValueError("DiagPlusLowRank: d contains NaN or inf")
            if not bool(np.all(np.asarray(d) > 0)):
                raise ValueError(f"DiagPlusLowRank: d must be > 0, got min {float(np.min(np.asarray(d)))}")
        if is_concrete(B) and not _all_finite(B):
            raise ValueError("DiagPlusLowRank: B contains NaN or inf")
        self._set(d=d, B=B)

    @property
    def size(self):
        return self.d.shape[-1]

    @property
    def rank(self):
        """``r``."""
        return self.B.shape[-1]

    @property
    def dtype(self):
        return jnp.result_type(self.d, self.B)

    @property
    def sqrt_cols(self):
        return self.size + self.rank

    def _capacitance_chol(self):
        """Lower Cholesky factor of :math:`C = I_r + B^\\top D^{-1} B`."""
        C = jnp.eye(self.rank, dtype=self.dtype) + self.B.T @ (self.B / self.d[:, None])
        return jnp.linalg.cholesky(C)

    def matmul(self, X):
        X = _check_rhs(self, X, self.size, "matmul", "X")
        return _bcast(self.d, X) * X + self.B @ (self.B.T @ X)

    def solve(self, X):
        """Woodbury: :math:`K^{-1} X = D^{-1} X - D^{-1} B C^{-1} B^\\top D^{-1} X`."""
        X = _check_rhs(self, X, self.size, "solve", "X")
        Dinv_X = X / _bcast(self.d, X)
        Dinv_B = self.B / self.d[:, None]
        return Dinv_X - Dinv_B @ cho_solve((self._capacitance_chol(), True), self.B.T @ Dinv_X)

    def logdet(self):
        """Determinant lemma: :math:`\\log|K| = \\sum_i \\log d_i + \\log|I_r + B^\\top D^{-1} B|`."""
        Lc = self._capacitance_chol()
        return jnp.sum(jnp.log(self.d)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(Lc)))

    def diagonal(self):
        return self.d + jnp.sum(self.B ** 2, axis=1)

    def sqrt(self):
        return jnp.concatenate([jnp.diag(jnp.sqrt(self.d)), self.B], axis=1)

    def sqrt_matmul(self, V):
        """:math:`R V = D^{1/2} V_{:n} + B V_{n:}`."""
        V = _check_rhs(self, V, self.sqrt_cols, "sqrt_matmul", "V")
        n = self.size
        return _bcast(jnp.sqrt(self.d), V[:n]) * V[:n] + self.B @ V[n:]

    def sqrt_rmatmul(self, X):
        """:math:`R^\\top X = [D^{1/2} X; B^\\top X]`."""
        X = _check_rhs(self, X, self.size, "sqrt_rmatmul", "X")
        return jnp.concatenate([_bcast(jnp.sqrt(self.d), X) * X, self.B.T @ X], axis=0)

    def to_dense(self):
        return jnp.diag(self.d) + self.B @ self.B.T


# --------------------------------------------------------------------------------------------------
# block diagonal
# --------------------------------------------------------------------------------------------------
def _check_operator_tuple(ops, cls, arg):
    if isinstance(ops, LinearOperator) or not isinstance(ops, (tuple, list)):
        raise ValueError(f"{cls}: {arg} must be a non-empty tuple of LinearOperator, "
                         f"got {type(ops).__name__}")
    ops = tuple(ops)
    if len(ops) == 0:
        raise ValueError(f"{cls}: {arg} must be a non-empty tuple of LinearOperator, got ()")
    for i, op in enumerate(ops):
        if not isinstance(op, LinearOperator):
            raise ValueError(f"{cls}: {arg}[{i}] must be a LinearOperator, got {type(op).__name__}")
    return ops


class BlockDiag(LinearOperator):
    """:math:`K = \\operatorname{blockdiag}(K_1, \\dots, K_b)`; every operation is blockwise.

    :math:`\\log|K| = \\sum_j \\log|K_j|`; the square root is
    :math:`R = \\operatorname{blockdiag}(R_1, \\dots, R_b)` with ``sqrt_cols`` :math:`= \\sum_j n'_j`.

    :param blocks: non-empty tuple of :class:`LinearOperator` (any types and sizes).
    """

    _params = ("blocks",)

    def __init__(self, blocks):
        self._set(blocks=_check_operator_tuple(blocks, "BlockDiag", "blocks"))

    @property
    def block_sizes(self) -> tuple:
        """The sizes ``n_j`` of the blocks."""
        return tuple(b.size for b in self.blocks)

    @property
    def size(self):
        return sum(self.block_sizes)

    @property
    def dtype(self):
        return jnp.result_type(*[b.dtype for b in self.blocks])

    @property
    def sqrt_cols(self):
        return sum(b.sqrt_cols for b in self.blocks)

    def _blockwise(self, method, X, arg, in_sizes=None):
        in_sizes = self.block_sizes if in_sizes is None else in_sizes
        X = _check_rhs(self, X, sum(in_sizes), method, arg)
        parts = _split(X, in_sizes)
        return jnp.concatenate([getattr(b, method)(p) for b, p in zip(self.blocks, parts)], axis=0)

    def matmul(self, B):
        return self._blockwise("matmul", B, "B")

    def solve(self, B):
        return self._blockwise("solve", B, "B")

    def whiten(self, B):
        return self._blockwise("whiten", B, "B")

    def sqrt_matmul(self, V):
        return self._blockwise("sqrt_matmul", V, "V", tuple(b.sqrt_cols for b in self.blocks))

    def sqrt_rmatmul(self, X):
        return self._blockwise("sqrt_rmatmul", X, "X")

    def logdet(self):
        return sum(b.logdet() for b in self.blocks)

    def diagonal(self):
        return jnp.concatenate([b.diagonal() for b in self.blocks])

    def trace_solve(self, S):
        """Blockwise :math:`\\sum_j \\operatorname{tr}(K_j^{-1} S_j)` when ``S`` is a
        :class:`BlockDiag` with the same block sizes; the general rule otherwise."""
        self._check_same_size(S, "trace_solve")
        if isinstance(S, BlockDiag) and S.block_sizes == self.block_sizes:
            return sum(b.trace_solve(s) for b, s in zip(self.blocks, S.blocks))
        return super().trace_solve(S)

    def sqrt(self):
        return block_diag(*[b.sqrt() for b in self.blocks])

    def to_dense(self):
        return block_diag(*[b.to_dense() for b in self.blocks])


def triangular_inverse(L):
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
def stacked_cholesky(K):
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

    def __init__(self, matrix, jitter=0.0):
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
    def from_cholesky(cls, L) -> "StackedBlockDiag":
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

    @property
    def sqrt_cols(self):
        return self.size

    def _batched(self, fn, X, method, arg):
        """Apply ``fn`` to X reshaped to (T, m, k) and flatten back to X's shape."""
        X = _check_rhs(self, X, self.size, method, arg)
        Y = fn(X.reshape(self.num_blocks, self.chol.shape[-1], -1))
        return Y.reshape(X.shape)

    def matmul(self, B):
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

    def solve(self, B):
        """:math:`K_t^{-1} B_t = L_t^{-\\top} (L_t^{-1} B_t)`, batched over the blocks."""
        def fn(Y):
            if Y.shape[-1] > Y.shape[-2]:
                Li = self.inverse_factor()
                return jnp.swapaxes(Li, -1, -2) @ (Li @ Y)
            return cho_solve((self.chol, True), Y)
        return self._batched(fn, B, "solve", "B")

    def whiten(self, B):
        """:math:`L_t^{-1} B_t`, batched over the blocks (through :meth:`inverse_factor` when B has more
        columns than a block has rows)."""
        return self._batched(self._whiten_stacked, B, "whiten", "B")

    def sqrt_matmul(self, V):
        return self._batched(lambda Y: self.chol @ Y, V, "sqrt_matmul", "V")

    def sqrt_rmatmul(self, X):
        return self._batched(lambda Y: jnp.swapaxes(self.chol, -1, -2) @ Y, X, "sqrt_rmatmul", "X")

    def inv_quad(self, b):
        b = _check_rhs(self, b, self.size, "inv_quad", "b")
        return jnp.sum(self.whiten(b) ** 2, axis=0)

    def logdet(self):
        return 2.0 * jnp.sum(jnp.log(jnp.diagonal(self.chol, axis1=-2, axis2=-1)))

    def diagonal(self):
        """:math:`\\operatorname{diag}(L_t L_t^\\top) = \\sum_j L_{t,ij}^2` (no product of the factors)."""
        return jnp.sum(self.chol**2, axis=-1).reshape(-1)

    def trace_solve(self, S):
        """:math:`\\sum_t \\|L_t^{-1} R_{S,t}\\|_F^2` in one batched solve when ``S`` is a
        :class:`StackedBlockDiag` of the same shape; blockwise for a :class:`BlockDiag` of the same block
        sizes; the general rule otherwise."""
        self._check_same_size(S, "trace_solve")
        if isinstance(S, StackedBlockDiag) and S.chol.shape == self.chol.shape:
            return jnp.sum(solve_triangular(self.chol, S.chol, lower=True) ** 2)
        return super().trace_solve(S)

    def sqrt(self):
        return block_diag(*[self.chol[t] for t in range(self.num_blocks)])

    def to_dense(self):
        return block_diag(*[self.matrix[t] for t in range(self.num_blocks)])


# --------------------------------------------------------------------------------------------------
# Kronecker
# --------------------------------------------------------------------------------------------------
class Kronecker(LinearOperator):
    """:math:`K = K_1 \\otimes K_2 \\otimes \\dots \\otimes K_d` (``jnp.kron`` order: the first factor
    varies slowest).

    Products, solves and square-root maps apply each factor along its own axis of the reshaped
    right-hand side: :math:`(\\otimes_j A_j) \\operatorname{vec}(X)`. With :math:`n = \\prod_j n_j`,
    :math:`\\log|K| = \\sum_j (n / n_j) \\log|K_j|`, :math:`\\operatorname{diag}(K) = \\otimes_j
    \\operatorname{diag}(K_j)`, and the square root is :math:`R = \\otimes_j R_j` with
    ``sqrt_cols`` :math:`= \\prod_j n'_j`. The full matrix is formed only by :meth:`to_dense` and
    :meth:`sqrt`.

    :param factors: non-empty tuple of :class:`LinearOperator`.
    """

    _params = ("factors",)

    def __init__(self, factors):
        self._set(factors=_check_operator_tuple(factors, "Kronecker", "factors"))

    @property
    def factor_sizes(self) -> tuple:
        """The sizes ``n_j`` of the factors."""
        return tuple(f.size for f in self.factors)

    @property
    def size(self):
        return math.prod(self.factor_sizes)

    @property
    def dtype(self):
        return jnp.result_type(*[f.dtype for f in self.factors])

    @property
    def sqrt_cols(self):
        return math.prod(f.sqrt_cols for f in self.factors)

    def _apply(self, method, X, arg, in_sizes=None):
        in_sizes = self.factor_sizes if in_sizes is None else in_sizes
        X = _check_rhs(self, X, math.prod(in_sizes), method, arg)
        return _kron_apply([getattr(f, method) for f in self.factors], in_sizes, X)

    def matmul(self, B):
        return self._apply("matmul", B, "B")

    def solve(self, B):
        """:math:`K^{-1} = \\otimes_j K_j^{-1}`."""
        return self._apply("solve", B, "B")

    def whiten(self, B):
        """:math:`R^\\top K^{-1} = \\otimes_j R_j^\\top K_j^{-1}`."""
        return self._apply("whiten", B, "B")

    def sqrt_matmul(self, V):
        return self._apply("sqrt_matmul", V, "V", tuple(f.sqrt_cols for f in self.factors))

    def sqrt_rmatmul(self, X):
        return self._apply("sqrt_rmatmul", X, "X")

    def logdet(self):
        """:math:`\\log|K| = \\sum_j (n / n_j) \\log|K_j|`."""
        n = self.size
        return sum((n // f.size) * f.logdet() for f in self.factors)

    def diagonal(self):
        out = self.factors[0].diagonal()
        for f in self.factors[1:]:
            out = jnp.kron(out, f.diagonal())
        return out

    def trace_solve(self, S):
        """:math:`\\prod_j \\operatorname{tr}(K_j^{-1} S_j)` when ``S`` is a :class:`Kronecker` with the
        same factor sizes; the general rule otherwise."""
        self._check_same_size(S, "trace_solve")
        if isinstance(S, Kronecker) and S.factor_sizes == self.factor_sizes:
            return math.prod(f.trace_solve(s) for f, s in zip(self.factors, S.factors))
        return super().trace_solve(S)

    def sqrt(self):
        out = self.factors[0].sqrt()
        for f in self.factors[1:]:
            out = jnp.kron(out, f.sqrt())
        return out

    def to_dense(self):
        out = self.factors[0].to_dense()
        for f in self.factors[1:]:
            out = jnp.kron(out, f.to_dense())
        return out


class KroneckerSum(LinearOperator):
    r""":math:`S = \otimes_j A_j + \otimes_j B_j` with :math:`A_j = L_jL_j^\top` (positive definite) and
    :math:`B_j = J_jJ_j^\top`: the "sum of two Kroneckers" covariance of q(u) for product features
    [1, §5.3; 2].

    Per factor, the generalised eigendecomposition :math:`L_j^{-1}B_jL_j^{-\top} = Q_j\Lambda_jQ_j^\top`
    gives :math:`W_j = L_jQ_j` and :math:`S = W(I + \otimes_j\Lambda_j)W^\top` with :math:`W = \otimes_j
    W_j`, so every operation costs O(Σ_j n_j³ + n Σ_j n_j) and :math:`\log|S| = \sum_j (n/n_j)\log|A_j|
    + \sum\log(1 + \otimes_j\lambda)`. The square root is :math:`W(I+\otimes\Lambda)^{1/2}` (square).
    ``eigh`` has unstable gradients at repeated eigenvalues: initialise the J_j with distinct entries.

    :param A_chol: tuple of lower Cholesky factors :math:`L_j` (n_j × n_j).
    :param B_chol: tuple of factors :math:`J_j` (n_j × r_j).

    References:
        1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes.
        2. Rakitsch, Lippert, Borgwardt, Stegle (2013), It is all in the noise: efficient multi-task
           Gaussian process inference with structured residuals.
    """

    _params = ("A_chol", "B_chol", "W", "lam")

    def __init__(self, A_chol, B_chol):
        A_chol = tuple(_as_float(L) for L in A_chol)
        B_chol = tuple(_as_float(J) for J in B_chol)
        if not A_chol or len(A_chol) != len(B_chol):
            raise ValueError("KroneckerSum: A_chol and B_chol must be non-empty tuples of equal length")
        for j, (L, J) in enumerate(zip(A_chol, B_chol)):
            if L.ndim != 2 or L.shape[0] != L.shape[1] or J.ndim != 2 or J.shape[0] != L.shape[0]:
                raise ValueError(f"KroneckerSum: factor {j} has A_chol {L.shape} and B_chol {J.shape}; "
                                 "need a square L and J with as many rows")
        Ws, lams = [], []
        for L, J in zip(A_chol, B_chol):
            C = solve_triangular(L, J, lower=True)
            lam, Q = jnp.linalg.eigh(C @ C.T)
            Ws.append(L @ Q)
            lams.append(jnp.maximum(lam, 0.0))
        self._set(A_chol=A_chol, B_chol=B_chol, W=tuple(Ws), lam=tuple(lams))

    @property
    def size(self):
        return math.prod(L.shape[0] for L in self.A_chol)

    @property
    def dtype(self):
        return self.A_chol[0].dtype

    @property
    def sqrt_cols(self):
        return self.size

    @property
    def _sizes(self):
        return [L.shape[0] for L in self.A_chol]

    def _d(self):
        out = self.lam[0]
        for lam in self.lam[1:]:
            out = jnp.kron(out, lam)
        return 1.0 + out

    def _W(self, X, transpose=False):
        return _kron_apply([(lambda x, W=W: W.T @ x) if transpose else (lambda x, W=W: W @ x)
                            for W in self.W], self._sizes, X)

    def _Winv(self, X, transpose=False):
        if transpose:  # W⁻ᵀ x = L⁻ᵀ Q x
            maps = [lambda x, L=L, W=W: solve_triangular(L.T, solve_triangular(L, W, lower=True) @ x,
                                                         lower=False) for L, W in zip(self.A_chol, self.W)]
        else:  # W⁻¹ x = Qᵀ L⁻¹ x
            maps = [lambda x, L=L, W=W: solve_triangular(L, W, lower=True).T @ solve_triangular(
                L, x, lower=True) for L, W in zip(self.A_chol, self.W)]
        return _kron_apply(maps, self._sizes, X)

    def matmul(self, B):
        B = _check_rhs(self, B, self.size, "matmul")
        return self._W(_bcast(self._d(), B) * self._W(B, transpose=True))

    def solve(self, B):
        B = _check_rhs(self, B, self.size, "solve")
        return self._Winv(self._Winv(B) / _bcast(self._d(), B), transpose=True)

    def logdet(self):
        n = self.size
        return (sum((n // L.shape[0]) * 2.0 * jnp.sum(jnp.log(jnp.diag(L))) for L in self.A_chol)
                + jnp.sum(jnp.log(self._d())))

    def diagonal(self):
        a = [jnp.sum(L**2, 1) for L in self.A_chol]
        b = [jnp.sum(J**2, 1) for J in self.B_chol]
        da, db = a[0], b[0]
        for x, z in zip(a[1:], b[1:]):
            da, db = jnp.kron(da, x), jnp.kron(db, z)
        return da + db

    def sqrt_matmul(self, V):
        V = _check_rhs(self, V, self.size, "sqrt_matmul", "V")
        return self._W(_bcast(jnp.sqrt(self._d()), V) * V)

    def sqrt_rmatmul(self, X):
        X = _check_rhs(self, X, self.size, "sqrt_rmatmul", "X")
        return _bcast(jnp.sqrt(self._d()), X) * self._W(X, transpose=True)

    def sqrt(self):
        W = self.W[0]
        for w in self.W[1:]:
            W = jnp.kron(W, w)
        return W * jnp.sqrt(self._d())[None, :]

    def to_dense(self):
        A, B = self.A_chol[0] @ self.A_chol[0].T, self.B_chol[0] @ self.B_chol[0].T
        for L, J in zip(self.A_chol[1:], self.B_chol[1:]):
            A, B = jnp.kron(A, L @ L.T), jnp.kron(B, J @ J.T)
        return A + B


__all__.append("KroneckerSum")
