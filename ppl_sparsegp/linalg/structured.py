"""Operators built from other operators: :class:`BlockDiag` (blockwise), :class:`Kronecker` (a product of
factors, applied along the axes of the reshaped right-hand side) and :class:`KroneckerSum` (the sum of two
Kronecker products, through a per-factor generalised eigendecomposition)."""
from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
from jax.scipy.linalg import block_diag, solve_triangular
from jax.typing import ArrayLike

from .base import LinearOperator, _as_float, _bcast, _check_rhs

__all__ = ["BlockDiag", "Kronecker", "KroneckerSum"]


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# block diagonal
# --------------------------------------------------------------------------------------------------
class BlockDiag(LinearOperator):
    """:math:`K = \\operatorname{blockdiag}(K_1, \\dots, K_b)`; every operation is blockwise.

    :math:`\\log|K| = \\sum_j \\log|K_j|`; the square root is
    :math:`R = \\operatorname{blockdiag}(R_1, \\dots, R_b)` with ``sqrt_cols`` :math:`= \\sum_j n'_j`.

    :param blocks: non-empty tuple of :class:`LinearOperator` (any types and sizes).
    """

    _params = ("blocks",)

    def __init__(self, blocks: Sequence[LinearOperator]):
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

    def matmul(self, B: jax.Array) -> jax.Array:
        return self._blockwise("matmul", B, "B")

    def solve(self, B: jax.Array) -> jax.Array:
        return self._blockwise("solve", B, "B")

    def whiten(self, B: jax.Array) -> jax.Array:
        return self._blockwise("whiten", B, "B")

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        return self._blockwise("sqrt_matmul", V, "V", tuple(b.sqrt_cols for b in self.blocks))

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        return self._blockwise("sqrt_rmatmul", X, "X")

    def solve_sqrt(self, V: jax.Array) -> jax.Array:
        """Blockwise :math:`K_j^{-1} R_j V_j` (each block's own form: no solve for a disjoint
        :class:`~ppl_sparsegp.linalg.DiagPlusLowRank`, one triangular solve for a Cholesky factor)."""
        return self._blockwise("solve_sqrt", V, "V", tuple(b.sqrt_cols for b in self.blocks))

    def logdet(self):
        return sum(b.logdet() for b in self.blocks)

    def diagonal(self):
        return jnp.concatenate([b.diagonal() for b in self.blocks])

    def trace_solve(self, S: LinearOperator) -> jax.Array:
        """Blockwise :math:`\\sum_j \\operatorname{tr}(K_j^{-1} S_j)` when ``S`` is a
        :class:`BlockDiag` with the same block sizes; by parts of ``S`` otherwise
        (:meth:`~ppl_sparsegp.linalg.LinearOperator._trace_solve_by_parts`: blockwise solves with a stored
        factor, :meth:`_inv_diagonal` for a diagonal part; any other ``S`` raises)."""
        self._check_same_size(S, "trace_solve")
        if isinstance(S, BlockDiag) and S.block_sizes == self.block_sizes:
            return sum(b.trace_solve(s) for b, s in zip(self.blocks, S.blocks))
        return self._trace_solve_by_parts(S)

    def _inv_diagonal(self):
        return jnp.concatenate([b._inv_diagonal() for b in self.blocks])

    def sqrt(self):
        return block_diag(*[b.sqrt() for b in self.blocks])

    def to_dense(self):
        return block_diag(*[b.to_dense() for b in self.blocks])


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

    def __init__(self, factors: Sequence[LinearOperator]):
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

    def matmul(self, B: jax.Array) -> jax.Array:
        return self._apply("matmul", B, "B")

    def solve(self, B: jax.Array) -> jax.Array:
        """:math:`K^{-1} = \\otimes_j K_j^{-1}`."""
        return self._apply("solve", B, "B")

    def whiten(self, B: jax.Array) -> jax.Array:
        """:math:`R^\\top K^{-1} = \\otimes_j R_j^\\top K_j^{-1}`."""
        return self._apply("whiten", B, "B")

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        return self._apply("sqrt_matmul", V, "V", tuple(f.sqrt_cols for f in self.factors))

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        return self._apply("sqrt_rmatmul", X, "X")

    def solve_sqrt(self, V: jax.Array) -> jax.Array:
        """:math:`K^{-1} R V = (\\otimes_j K_j^{-1} R_j) V`: one pass of each factor's own form, not a
        product and then a solve along every axis."""
        return self._apply("solve_sqrt", V, "V", tuple(f.sqrt_cols for f in self.factors))

    def logdet(self):
        """:math:`\\log|K| = \\sum_j (n / n_j) \\log|K_j|`."""
        n = self.size
        return sum((n // f.size) * f.logdet() for f in self.factors)

    def diagonal(self):
        out = self.factors[0].diagonal()
        for f in self.factors[1:]:
            out = jnp.kron(out, f.diagonal())
        return out

    def trace_solve(self, S: LinearOperator) -> jax.Array:
        """:math:`\\prod_j \\operatorname{tr}(K_j^{-1} S_j)` when ``S`` is a :class:`Kronecker` with the
        same factor sizes; :math:`\\prod_j \\operatorname{tr}(K_j^{-1} A_j) + \\prod_j
        \\operatorname{tr}(K_j^{-1} B_j)` when ``S`` is a :class:`KroneckerSum` :math:`\\otimes_j A_j +
        \\otimes_j B_j` with the same factor sizes; by parts of ``S`` otherwise
        (:meth:`~ppl_sparsegp.linalg.LinearOperator._trace_solve_by_parts`; any other ``S`` raises)."""
        self._check_same_size(S, "trace_solve")
        if isinstance(S, Kronecker) and S.factor_sizes == self.factor_sizes:
            return math.prod(f.trace_solve(s) for f, s in zip(self.factors, S.factors))
        if isinstance(S, KroneckerSum) and tuple(S._sizes) == self.factor_sizes:
            return (math.prod(f._trace_solve_factor(L) for f, L in zip(self.factors, S.A_chol))
                    + math.prod(f._trace_solve_factor(J) for f, J in zip(self.factors, S.B_chol)))
        return self._trace_solve_by_parts(S)

    def _inv_diagonal(self):
        """:math:`\\operatorname{diag}(K^{-1}) = \\otimes_j \\operatorname{diag}(K_j^{-1})`."""
        out = self.factors[0]._inv_diagonal()
        for f in self.factors[1:]:
            out = jnp.kron(out, f._inv_diagonal())
        return out

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

    def __init__(self, A_chol: Sequence[ArrayLike], B_chol: Sequence[ArrayLike]):
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

    def matmul(self, B: jax.Array) -> jax.Array:
        B = _check_rhs(self, B, self.size, "matmul")
        return self._W(_bcast(self._d(), B) * self._W(B, transpose=True))

    def solve(self, B: jax.Array) -> jax.Array:
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

    def sqrt_matmul(self, V: jax.Array) -> jax.Array:
        V = _check_rhs(self, V, self.size, "sqrt_matmul", "V")
        return self._W(_bcast(jnp.sqrt(self._d()), V) * V)

    def sqrt_rmatmul(self, X: jax.Array) -> jax.Array:
        X = _check_rhs(self, X, self.size, "sqrt_rmatmul", "X")
        return _bcast(jnp.sqrt(self._d()), X) * self._W(X, transpose=True)

    def trace_solve(self, S: LinearOperator) -> jax.Array:
        """By parts of ``S`` (:meth:`~ppl_sparsegp.linalg.LinearOperator._trace_solve_by_parts`): solves
        with ``S``'s stored factor, :meth:`_inv_diagonal` for its diagonal part; any other ``S`` raises."""
        return self._trace_solve_by_parts(S)

    def _inv_diagonal(self):
        """:math:`\\operatorname{diag}(S^{-1})_i = \\sum_k (W^{-\\top})_{ik}^2 / d_k` with
        :math:`W^{-\\top}\\circ W^{-\\top} = \\otimes_j (W_j^{-\\top}\\circ W_j^{-\\top})`, applied factor by
        factor to :math:`1/d` (:math:`W_j^{-\\top} = L_j^{-\\top} Q_j`)."""
        maps = [lambda x, L=L, W=W: (solve_triangular(L.T, solve_triangular(L, W, lower=True),
                                                       lower=False) ** 2) @ x
                for L, W in zip(self.A_chol, self.W)]
        return _kron_apply(maps, self._sizes, 1.0 / self._d())

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

