"""Structured symmetric positive-definite operators.

Every operator here represents a symmetric positive-(semi)definite ``n x n`` matrix :math:`K` without
storing it densely. Operators are immutable pytrees (:class:`~ppl_sparsegp.parameters.Module`), so they pass
through ``jax.jit``, ``jax.vmap`` and ``jax.grad``; validation of constructor arguments runs only on
concrete (non-traced) values.

Each operator provides ``matmul``, ``solve``, ``logdet``, ``diagonal``, ``inv_quad``, ``trace_solve`` and
a square-root factor :math:`R` with :math:`R R^\\top = K`, which may be non-square (``n x n'`` with
``n' = sqrt_cols``), used through ``sqrt_matmul`` (:math:`R V`), ``sqrt_rmatmul`` (:math:`R^\\top X`),
``whiten`` (:math:`R^\\top K^{-1} B`) and ``solve_sqrt`` (:math:`K^{-1} R V`). Only
:meth:`LinearOperator.to_dense` and :meth:`LinearOperator.sqrt` form dense matrices; an operation a
structure cannot do fast raises ``NotImplementedError`` instead of densifying silently.

One file per structure: :mod:`.base` (the :class:`LinearOperator` interface), :mod:`.dense` (:class:`Dense`,
:class:`StackedBlockDiag`), :mod:`.diagonal` (:class:`Diagonal`, :class:`Identity`), :mod:`.low_rank`
(:class:`DiagPlusLowRank`), :mod:`.structured` (:class:`BlockDiag`, :class:`Kronecker`,
:class:`KroneckerSum`), :mod:`.cholesky` (:func:`triangular_inverse`, :func:`stacked_cholesky`) and
:mod:`.woodbury` (the one Woodbury/capacitance numerics of every low-rank-plus-noise marginal).
"""
from .base import LinearOperator
from .cholesky import stacked_cholesky, triangular_inverse
from .dense import Dense, StackedBlockDiag
from .diagonal import Diagonal, Identity
from .low_rank import DiagPlusLowRank
from .structured import BlockDiag, Kronecker, KroneckerSum

__all__ = [
    "LinearOperator",
    "Dense",
    "Diagonal",
    "Identity",
    "DiagPlusLowRank",
    "BlockDiag",
    "StackedBlockDiag",
    "Kronecker",
    "KroneckerSum",
    "triangular_inverse",
    "stacked_cholesky",
]
