"""Inputs on a Cartesian grid, kept as per-dimension axes so Kronecker features never form the full Kuf."""
from __future__ import annotations

from typing import Annotated, Any

import jax.numpy as jnp
import numpy as np

from .parameters import Module, check_finite
from .validation import ArrayOf, SequenceOf, validated

__all__ = ["Grid"]


class Grid(Module):
    """The grid ``axes[0] × axes[1] × ...``; points are ordered with the first axis slowest
    (``jnp.meshgrid(..., indexing="ij")``), the order of ``jnp.kron``.

    :param axes: a list or tuple of 1-D arrays, one per input dimension, each non-empty and finite.
    :raises ValueError: for an empty axis or one that is not 1-D or finite.
    """

    _params = ("axes",)

    @validated
    def __init__(self, axes: Annotated[Any, SequenceOf(ArrayOf(rank=1))]):
        axes = tuple(jnp.asarray(a, dtype=jnp.result_type(float)) for a in axes)
        if not axes or any(a.ndim != 1 or a.shape[0] == 0 for a in axes):
            raise ValueError("axes must be a non-empty sequence of non-empty 1-D arrays")
        for d, a in enumerate(axes):
            check_finite(a, f"axes[{d}]")
        self._set(axes=axes)

    @property
    def shape(self):
        """(N, D) of the equivalent point array."""
        return (int(np.prod([a.shape[0] for a in self.axes])), len(self.axes))

    @property
    def ndim(self):
        return 2

    @property
    def dtype(self):
        return self.axes[0].dtype

    def points(self) -> jnp.ndarray:
        """The (N, D) array of grid points."""
        mesh = jnp.meshgrid(*self.axes, indexing="ij")
        return jnp.stack([m.reshape(-1) for m in mesh], axis=1)

    def __getitem__(self, idx):
        raise ValueError("a Grid cannot be indexed or minibatched; use grid.points() for an array")
