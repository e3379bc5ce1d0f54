r"""Variational Fourier features (VFF) for Matérn-1/2, 3/2 and 5/2 kernels on an interval [a, b].

Frequencies :math:`\omega_m = 2\pi m/(b-a)`, m = 0..M−1, basis
:math:`\boldsymbol\phi(x) = [1, \cos\omega_m(x-a), \sin\omega_m(x-a)]`, 2M−1 features. The inducing
variables are RKHS projections :math:`u_m = \langle\phi_m, f\rangle_{\mathcal H}` on [a, b] [1, §3], so

* :math:`K_{uf} = \boldsymbol\phi(x)` for x in [a, b]: it does **not** depend on the hyperparameters;
  outside [a, b] it follows the edge formulas of [1, Table 1] (the sine rows with the corrected sign
  :math:`(x - \text{edge})\,\omega_m e^{-\lambda r}\cdots`, which makes Kuf C¹ at the edges);
* :math:`K_{uu} = \operatorname{diag}(\boldsymbol\alpha) + \sum_{k\le K}\boldsymbol\beta_k
  \boldsymbol\beta_k^\top` with K = 1, 2, 3 for ν = 1/2, 3/2, 5/2 [1, eqs. 62–64, App. B], returned as a
  :class:`~ppl_sparsegp.linalg.DiagPlusLowRank` operator, so solves cost O(MK²) and the whitening factor
  is :math:`R = [D^{1/2}, B]` (M × (M + K)).

With :math:`s(\omega)` the 1-D spectral density (library convention), :math:`\lambda = \sqrt{2\nu}/\ell`,
:math:`\sigma^2` the variance: :math:`\boldsymbol\alpha = \frac{b-a}{2}[2/s(0), 1/s(\omega_{1..}),
1/s(\omega_{1..})]`; :math:`\beta_1 = \sigma^{-1}\mathbb 1_{\cos}`; for 3/2 :math:`\beta_2 =
[0; \omega_m/(\lambda\sigma)]_{\sin}`; for 5/2 :math:`\beta_2 = [(3\omega_m^2/\lambda^2-1)/(\sqrt8\sigma)]_{\cos}`,
:math:`\beta_3 = [0; \sqrt3\,\omega_m/(\lambda\sigma)]_{\sin}`.

Kuu's dynamic range grows like :math:`\omega_M^{2\nu+1}`: use float64 (the runner does) for large M.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..kernels import Matern12, Matern32, Matern52, check_inputs
from ..linalg import DiagPlusLowRank
from .base import InducingFeature, Kuf, Kuu

__all__ = ["FourierFeatures"]

SUPPORTED = (Matern12, Matern32, Matern52)


class FourierFeatures(InducingFeature):
    """Variational Fourier features on [a, b] for 1-D inputs (X of shape (N, 1)).

    :param a: left end of the interval (wider than the data; see [1, §6.1.2]).
    :param b: right end, b > a.
    :param num_frequencies: M ≥ 1 frequencies including 0, giving 2M − 1 features.
    """

    _static = ("a", "b", "num_frequencies")

    def __init__(self, a, b, num_frequencies):
        if not (np.isfinite(a) and np.isfinite(b) and float(a) < float(b)):
            raise ValueError(f"the interval must satisfy a < b (finite), got a={a!r}, b={b!r}")
        if int(num_frequencies) != num_frequencies or num_frequencies < 1:
            raise ValueError(f"num_frequencies must be a positive integer, got {num_frequencies!r}")
        self._set(a=float(a), b=float(b), num_frequencies=int(num_frequencies))

    @property
    def num_features(self):
        return 2 * self.num_frequencies - 1

    def omegas(self, dtype=None):
        """ω_m = 2πm/(b − a), m = 0..M−1."""
        return 2 * math.pi * jnp.arange(self.num_frequencies, dtype=dtype) / (self.b - self.a)

    def check_inputs(self, X, name="X"):
        return check_inputs(X, name, 1)

    def inside(self, X) -> bool:
        """Whether every input lies in [a, b] (then Kuf does not depend on the hyperparameters)."""
        x = np.asarray(X)
        return bool(np.all((x >= self.a) & (x <= self.b)))

    def basis(self, x):
        """The basis φ(x) = [1, cos ω_m(x−a), sin ω_m(x−a)] for a vector x: (2M−1, N)."""
        w = self.omegas(x.dtype)
        t = w[:, None] * (x[None, :] - self.a)
        return jnp.concatenate([jnp.cos(t), jnp.sin(t[1:])], axis=0)


def _check_kernel(kernel):
    if not isinstance(kernel, SUPPORTED):
        raise NotImplementedError(
            f"variational Fourier features support Matern12, Matern32 and Matern52 kernels, got "
            f"{type(kernel).__name__}")
    if jnp.ndim(kernel.lengthscale) > 0 and jnp.size(kernel.lengthscale) != 1:
        raise ValueError("FourierFeatures are 1-D: the kernel's lengthscale must be a scalar")


@Kuu.register(FourierFeatures, Matern12)
@Kuu.register(FourierFeatures, Matern32)
@Kuu.register(FourierFeatures, Matern52)
def _kuu_fourier(feature, kernel):
    _check_kernel(kernel)
    dtype = jnp.result_type(kernel.variance, float)
    w = feature.omegas(dtype)
    s = kernel.spectral_density(w[:, None])  # s(ω_m), library convention = [1, eq. 5-10]
    half = 0.5 * (feature.b - feature.a)
    d = half * jnp.concatenate([2.0 / s[:1], 1.0 / s[1:], 1.0 / s[1:]])  # Eq. (62-64) [1]
    sigma = jnp.sqrt(kernel.variance)
    lam = jnp.reshape(kernel.lam, ())
    Mc, Ms = feature.num_frequencies, feature.num_frequencies - 1
    zc, zs = jnp.zeros(Mc, dtype), jnp.zeros(Ms, dtype)
    cols = [jnp.concatenate([jnp.ones(Mc, dtype) / sigma, zs])]  # β₁ = σ⁻¹ 1_cos
    if kernel.nu == 1.5:
        cols.append(jnp.concatenate([zc, w[1:] / (lam * sigma)]))  # β₂, App. B [1]
    elif kernel.nu == 2.5:
        cols.append(jnp.concatenate([(3 * w**2 / lam**2 - 1) / (math.sqrt(8.0) * sigma), zs]))
        cols.append(jnp.concatenate([zc, math.sqrt(3.0) * w[1:] / (lam * sigma)]))
    return DiagPlusLowRank(d, jnp.stack(cols, axis=1))


@Kuf.register(FourierFeatures, Matern12)
@Kuf.register(FourierFeatures, Matern32)
@Kuf.register(FourierFeatures, Matern52)
def _kuf_fourier(feature, kernel, X):
    _check_kernel(kernel)
    X = feature.check_inputs(X)
    x = X[:, 0]
    dtype = jnp.result_type(x.dtype, float)
    x = x.astype(dtype)
    w = feature.omegas(dtype)[:, None]
    xc = jnp.clip(x, feature.a, feature.b)
    r = jnp.abs(x - xc)[None, :]  # distance to the nearest edge; 0 inside
    lam = jnp.reshape(kernel.lam, ())
    e = jnp.exp(-lam * r)
    # Table 1 [1]: cos rows (cos ω(x_c−a) = 1 at both edges) and sin rows with the corrected sign
    if kernel.nu == 0.5:
        cos_edge, sin_edge = e, jnp.zeros_like(r)
    elif kernel.nu == 1.5:
        cos_edge, sin_edge = (1 + lam * r) * e, e
    else:
        cos_edge = (1 + lam * r + 0.5 * (lam**2 - w**2) * r**2) * e
        sin_edge = (1 + lam * r) * e
    t = w * (xc[None, :] - feature.a)
    outside = r > 0
    cos_rows = jnp.where(outside, cos_edge, jnp.cos(t))
    sin_rows = jnp.where(outside, (x - xc)[None, :] * w * sin_edge, jnp.sin(t))
    return jnp.concatenate([cos_rows, sin_rows[1:]], axis=0)
