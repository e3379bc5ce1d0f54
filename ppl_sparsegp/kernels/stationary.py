r"""Stationary kernels :math:`\sigma^2\rho(\tau)` of the scaled distance: squared exponential and
Matérn-1/2, 3/2, 5/2, with their spectral densities and frequency samplers.

Every kernel has ``variance`` :math:`\sigma^2` and ``lengthscale`` :math:`\ell` (a scalar, or one per
input dimension), evaluates its Gram matrix ``k(X1, X2)`` for inputs of shape (N, D), its ``diag(X)``, its
``spectral_density(omega)`` and draws ``sample_frequencies(rng_key, n, input_dim)``.

The spectral convention (the only one in the library, :mod:`ppl_sparsegp.kernels`): :math:`s(\boldsymbol
\omega) = \int\kappa(\mathbf r)e^{-i\boldsymbol\omega^\top\mathbf r}d\mathbf r` with angular frequency
:math:`\boldsymbol\omega`, the VFF paper's [1] in 1-D.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Rasmussen, Williams (2006), Gaussian Processes for Machine Learning, §4.2.
"""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln
from jax.typing import ArrayLike

from ..parameters import is_concrete, value_shape
from ..validation import PositiveScalar, PositiveScales, validated
from .base import Kernel, as_points, check_inputs, safe_sqrt as _safe_sqrt

__all__ = ["Stationary", "SquaredExponential", "Matern12", "Matern32", "Matern52"]


class Stationary(Kernel):
    r"""A stationary kernel :math:`\sigma^2\,\rho(\tau)` of the scaled distance
    :math:`\tau = \|(\mathbf x - \mathbf x')/\boldsymbol\ell\|`.

    :param variance: :math:`\sigma^2 > 0` (number, array, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, scalar or shape (D,) for one per input dimension.
    """

    _params = ("variance", "lengthscale")
    _positive = ("variance", "lengthscale")

    @validated
    def __init__(self, variance: PositiveScalar = 1.0, lengthscale: PositiveScales = 1.0):
        if is_concrete(variance):
            variance = jnp.asarray(variance, dtype=jnp.result_type(float))
            if variance.ndim != 0:
                raise ValueError(f"variance must be a scalar, got shape {variance.shape}")
        if is_concrete(lengthscale):
            lengthscale = jnp.asarray(lengthscale, dtype=jnp.result_type(float))
            if lengthscale.ndim > 1:
                raise ValueError(f"lengthscale must be a scalar or shape (D,), got {lengthscale.shape}")
        self._set(variance=variance, lengthscale=lengthscale)

    # --- profile -----------------------------------------------------------------------------------
    def profile(self, tau: ArrayLike) -> jax.Array:
        """The correlation :math:`\\rho(\\tau)`, with :math:`\\rho(0) = 1`, of scaled distances τ (any shape,
        kept)."""
        raise NotImplementedError

    @property
    def input_dim(self):
        ls = value_shape(self.lengthscale)  # a template's prior or Param too
        return ls[0] if len(ls) == 1 else None

    def _inputs(self, X1, X2):
        """The validated point arrays (N1, D) and (N2, D) (X2 None: X1 itself)."""
        A = as_points(check_inputs(X1, "X", self.input_dim))
        B = A if X2 is None else as_points(check_inputs(X2, "X", self.input_dim))
        if A.shape[1] != B.shape[1]:
            raise ValueError(f"X1 and X2 have different input dimensions: {A.shape[1]} vs {B.shape[1]}")
        return A, B

    def scaled_sqdist(self, X1: ArrayLike, X2: Optional[ArrayLike] = None) -> jax.Array:
        """Squared scaled distances :math:`\\tau^2` (N1, N2), clamped at 0, between inputs X1 (N1, D) and X2
        (N2, D) (default X1)."""
        return _scaled_sqdist(self.lengthscale, *self._inputs(X1, X2))

    def _gram_points(self, A, B):
        """k(A, B) for validated point arrays (one compiled program per kernel class and shapes: ``_gram``)."""
        return self.variance * self.profile(_safe_sqrt(_scaled_sqdist(self.lengthscale, A, B)))

    def __call__(self, X1, X2=None):
        return _gram(self, *self._inputs(X1, X2))

    def diag(self, X: ArrayLike) -> jax.Array:
        X = check_inputs(X, "X", self.input_dim)
        return jnp.full(X.shape[:1], self.variance, dtype=jnp.result_type(X.dtype, float))

    def kappa(self, r: ArrayLike) -> jax.Array:
        """:math:`\\kappa(\\mathbf r)` for difference vectors r of shape (..., D)."""
        tau = _safe_sqrt(jnp.sum((jnp.asarray(r) / self.lengthscale) ** 2, axis=-1))
        return self.variance * self.profile(tau)

    # --- spectrum ----------------------------------------------------------------------------------
    def _lengthscales(self, D):
        return jnp.broadcast_to(jnp.asarray(self.lengthscale), (D,))

    def log_unit_density(self, w: ArrayLike) -> jax.Array:
        """log p₁(w): normalised spectral density of the unit-lengthscale kernel, w of shape (..., D)."""
        raise NotImplementedError

    def spectral_density(self, omega: ArrayLike) -> jax.Array:
        r""":math:`s(\boldsymbol\omega) = \sigma^2 (2\pi)^D \prod_d \ell_d\; p_1(\boldsymbol\omega\odot
        \boldsymbol\ell)` for ω of shape (..., D) (a 1-D array is read as D = 1)."""
        omega = jnp.asarray(omega)
        if omega.ndim == 1 and self.input_dim in (None, 1):
            omega = omega[:, None]
        D = omega.shape[-1]
        ls = self._lengthscales(D)
        log_s = (jnp.log(self.variance) + D * math.log(2 * math.pi) + jnp.sum(jnp.log(ls))
                 + self.log_unit_density(omega * ls))
        return jnp.exp(log_s)

    def log_spectral_density_normalised(self, omega: jax.Array) -> jax.Array:
        """log p(ω) = log s(ω) − log((2π)^D σ²), the density ``sample_frequencies`` draws from."""
        D = omega.shape[-1]
        ls = self._lengthscales(D)
        return jnp.sum(jnp.log(ls)) + self.log_unit_density(omega * ls)

    def sample_unit_frequencies(self, rng_key: jax.Array, n: int, input_dim: int) -> jax.Array:
        """n draws from p₁ (unit lengthscale), shape (n, input_dim)."""
        raise NotImplementedError

    def sample_frequencies(self, rng_key: jax.Array, n: int, input_dim: Optional[int] = None) -> jax.Array:
        """n frequencies from the normalised spectral density p(ω), shape (n, D)."""
        D = input_dim if input_dim is not None else (self.input_dim or 1)
        return self.sample_unit_frequencies(rng_key, n, D) / self._lengthscales(D)


@jax.jit
def _scaled_sqdist(lengthscale, A, B):
    A, B = A / lengthscale, B / lengthscale
    centre = jnp.mean(A, axis=0)  # centring keeps |a|²+|b|²−2a·b accurate for offset inputs
    A, B = A - centre, B - centre
    d2 = jnp.sum(A**2, 1)[:, None] + jnp.sum(B**2, 1)[None, :] - 2.0 * A @ B.T
    return jnp.maximum(d2, 0.0)


# A Gram matrix is a dozen operations; called outside a trace (the dense references, predictions, the
# adequacy check) each would compile on its own at its shapes, so the arithmetic is one program per
# kernel class and shapes (10x faster eagerly; inside a model's trace it is inlined as before).
_gram = jax.jit(lambda kernel, A, B: kernel._gram_points(A, B))


class SquaredExponential(Stationary):
    r"""Squared exponential: :math:`\rho(\tau) = e^{-\tau^2/2}`; :math:`p_1 = \mathcal N(0, I)`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    def profile(self, tau: ArrayLike) -> jax.Array:
        return jnp.exp(-0.5 * tau**2)

    def _gram_points(self, A, B):  # avoid the sqrt: exact and smooth at r = 0
        return self.variance * jnp.exp(-0.5 * _scaled_sqdist(self.lengthscale, A, B))

    def log_unit_density(self, w: ArrayLike) -> jax.Array:
        D = w.shape[-1]
        return -0.5 * jnp.sum(w**2, -1) - 0.5 * D * math.log(2 * math.pi)

    def sample_unit_frequencies(self, rng_key: jax.Array, n: int, input_dim: int) -> jax.Array:
        return jax.random.normal(rng_key, (n, input_dim))


class _Matern(Stationary):
    r"""Matérn-ν with :math:`p_1` the multivariate Student-t with 2ν degrees of freedom [2, eq. 4.15]."""

    nu: float = None

    def log_unit_density(self, w: ArrayLike) -> jax.Array:
        D = w.shape[-1]
        df = 2.0 * self.nu
        return (gammaln((df + D) / 2) - gammaln(df / 2) - 0.5 * D * math.log(df * math.pi)
                - 0.5 * (df + D) * jnp.log1p(jnp.sum(w**2, -1) / df))

    def sample_unit_frequencies(self, rng_key: jax.Array, n: int, input_dim: int) -> jax.Array:
        kz, kg = jax.random.split(rng_key)
        z = jax.random.normal(kz, (n, input_dim))
        g = 2.0 * jax.random.gamma(kg, self.nu, (n, 1))  # chi-square with 2ν degrees of freedom
        return z / jnp.sqrt(g / (2.0 * self.nu))

    @property
    def lam(self):
        """:math:`\\lambda = \\sqrt{2\\nu}/\\ell` (the VFF paper's parameterisation)."""
        return math.sqrt(2.0 * self.nu) / self.lengthscale


class Matern12(_Matern):
    r"""Matérn-1/2 (exponential): :math:`\rho(\tau) = e^{-\tau}`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    nu = 0.5

    def profile(self, tau: ArrayLike) -> jax.Array:
        return jnp.exp(-tau)


class Matern32(_Matern):
    r"""Matérn-3/2: :math:`\rho(\tau) = (1+\sqrt3\tau)e^{-\sqrt3\tau}`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    nu = 1.5

    def profile(self, tau: ArrayLike) -> jax.Array:
        s = math.sqrt(3.0) * tau
        return (1.0 + s) * jnp.exp(-s)


class Matern52(_Matern):
    r"""Matérn-5/2: :math:`\rho(\tau) = (1+\sqrt5\tau+5\tau^2/3)e^{-\sqrt5\tau}`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    nu = 2.5

    def profile(self, tau: ArrayLike) -> jax.Array:
        s = math.sqrt(5.0) * tau
        return (1.0 + s + s**2 / 3.0) * jnp.exp(-s)
