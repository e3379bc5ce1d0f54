r"""The kernels' ground floor: the :class:`Kernel` base class and :func:`check_inputs`, the one input
check every kernel, feature and approximation runs (rank 2, at least one row, finite, the right D).
"""
from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ..grid import Grid
from ..parameters import Module, check_finite

__all__ = ["Kernel", "check_inputs"]  # as_points: the kernels' own helper (called under tracing), not API


def check_inputs(X: Union[ArrayLike, Grid], name: str = "X", input_dim: Optional[int] = None):
    """Validate an input array of shape (N, D): rank 2, at least one row, finite, matching ``input_dim``
    if given. Every feature, kernel and approximation checks its inputs here.

    A :class:`~ppl_sparsegp.grid.Grid` passes through unchanged (its axes were checked when built).

    :param X: the inputs (N, D), or a Grid.
    :param name: the argument's name, for the error messages.
    :param input_dim: the number of input dimensions D required, or None for any.
    :returns: X as a JAX array (a Grid unchanged).
    :raises ValueError: for NaN or infinite entries, a rank other than 2, zero rows, or a D other than
        ``input_dim``.
    """
    if isinstance(X, Grid):
        if input_dim is not None and X.shape[1] != input_dim:
            raise ValueError(f"{name} has {X.shape[1]} input dimensions, expected {input_dim}")
        return X
    check_finite(X, name)
    with jax.ensure_compile_time_eval():  # NumPy data stay concrete inside a trace (jnp.asarray would stage it)
        X = jnp.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must have shape (N, D) (rank 2), got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has no rows (shape {X.shape}): give at least one input")
    if input_dim is not None and X.shape[1] != input_dim:
        raise ValueError(f"{name} has {X.shape[1]} input dimensions, expected {input_dim}")
    return X


def as_points(X):
    """An (N, D) array for an array or a :class:`~ppl_sparsegp.grid.Grid`."""
    return X.points() if isinstance(X, Grid) else X


class Kernel(Module):
    """Base class of kernels: ``k(X1, X2)`` Gram matrix, ``diag(X)``."""

    def __call__(self, X1, X2=None):
        raise NotImplementedError

    def diag(self, X: ArrayLike) -> jax.Array:
        r"""The diagonal :math:`k(\mathbf x_i, \mathbf x_i)`, shape (N,), for inputs X (N, D)."""
        raise NotImplementedError

    @property
    def input_dim(self):
        """Number of input dimensions fixed by the kernel, or None if any D is accepted."""
        return None



def safe_sqrt(x):
    """√x with x clamped below at 10⁴ × the dtype's smallest normal (for Matérn distances)."""
    # the clamp zeroes the gradient at r = 0, where the Matérn distance derivative is undefined
    tiny = jnp.finfo(jnp.result_type(x)).tiny
    return jnp.sqrt(jnp.maximum(x, tiny * 1e4))
