r"""Sums and products of one-dimensional kernels (one input column each), and the constant diagonal
k(x, x) of the kernels that have one."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ..validation import AKernel, validated
from .base import Kernel, as_points, check_inputs
from .periodic import Periodic
from .stationary import Stationary
from .zonal import Zonal

__all__ = ["Additive", "Product", "constant_kernel_diagonal"]


class _Combination(Kernel):
    """Kernels acting on one input column each: ``kernels[d]`` sees column d."""

    _params = ("kernels",)

    def __init__(self, kernels: Sequence[Kernel]):
        kernels = tuple(kernels)
        if not kernels or not all(isinstance(k, Kernel) for k in kernels):
            raise ValueError("kernels must be a non-empty sequence of Kernel instances")
        self._set(kernels=kernels)

    @property
    def input_dim(self):
        return len(self.kernels)

    def _columns(self, X):
        X = as_points(check_inputs(X, "X", self.input_dim))
        return [X[:, d:d + 1] for d in range(X.shape[1])]

    def parts(self, X1: ArrayLike, X2: Optional[ArrayLike] = None) -> jax.Array:
        """The per-dimension Gram matrices, shape (D, N1, N2)."""
        c1 = self._columns(X1)
        c2 = c1 if X2 is None else self._columns(X2)
        return jnp.stack([k(a, b) for k, a, b in zip(self.kernels, c1, c2)])

    def parts_diag(self, X: ArrayLike) -> jax.Array:
        return jnp.stack([k.diag(c) for k, c in zip(self.kernels, self._columns(X))])


class Additive(_Combination):
    r"""Additive kernel :math:`k(\mathbf x,\mathbf x') = \sum_d k_d(x_d, x'_d)` [1, §4.1].

    :param kernels: a sequence of D one-dimensional kernels, ``kernels[d]`` acting on input column d.
    :raises ValueError: for an empty sequence or an element that is not a Kernel."""

    def __call__(self, X1, X2=None):
        return jnp.sum(self.parts(X1, X2), 0)

    def diag(self, X: ArrayLike) -> jax.Array:
        return jnp.sum(self.parts_diag(X), 0)


class Product(_Combination):
    r"""Separable kernel :math:`k(\mathbf x,\mathbf x') = \prod_d k_d(x_d, x'_d)` [1, §4.2].

    Its spectral density is the product of the 1-D densities, so frequencies are drawn per dimension.

    :param kernels: a sequence of D one-dimensional kernels, ``kernels[d]`` acting on input column d.
    :raises ValueError: for an empty sequence or an element that is not a Kernel.
    """

    def __call__(self, X1, X2=None):
        return jnp.prod(self.parts(X1, X2), 0)

    def diag(self, X: ArrayLike) -> jax.Array:
        return jnp.prod(self.parts_diag(X), 0)

    @property
    def variance(self):
        return math.prod([k.variance for k in self.kernels])

    def spectral_density(self, omega: ArrayLike) -> jax.Array:
        omega = jnp.asarray(omega)
        return jnp.prod(jnp.stack([k.spectral_density(omega[..., d:d + 1])
                                   for d, k in enumerate(self.kernels)]), 0)

    def sample_frequencies(self, rng_key: jax.Array, n: int, input_dim: Optional[int] = None) -> jax.Array:
        keys = jax.random.split(rng_key, len(self.kernels))
        return jnp.concatenate([k.sample_frequencies(kk, n, 1) for k, kk in zip(self.kernels, keys)], 1)


@validated
def constant_kernel_diagonal(kernel: AKernel):
    r"""k(x, x) of a kernel whose diagonal does not depend on x (stationary kernels and sums/products of
    them), so that :math:`\sum_n k(\mathbf x_n, \mathbf x_n) = N\,k(\mathbf x,\mathbf x)` needs no data.

    :param kernel: the kernel.
    :returns: k(x, x), a scalar array.
    :raises ValueError: for any other kernel.
    """
    if isinstance(kernel, (Stationary, Periodic)) or (isinstance(kernel, Zonal) and kernel.order == 0):
        return jnp.asarray(kernel.variance)
    if isinstance(kernel, Additive):
        return sum(constant_kernel_diagonal(k) for k in kernel.kernels)
    if isinstance(kernel, Product):
        out = 1.0
        for k in kernel.kernels:
            out = out * constant_kernel_diagonal(k)
        return jnp.asarray(out)
    raise ValueError("precomputed statistics need a kernel with a constant diagonal k(x, x) (a stationary "
                     "kernel, a zonal kernel of order 0 such as ChordalMatern or ArcCosine(0), or an "
                     f"Additive/Product of them), got {type(kernel).__name__}")
