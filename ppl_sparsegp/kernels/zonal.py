r"""Kernels on the sphere: :class:`SphereEmbedded` ((lon, lat) inputs through the unit sphere) and the
zonal kernels :class:`Zonal`, :class:`ArcCosine`, :class:`ChordalMatern` (expanded in spherical
harmonics by :class:`~ppl_sparsegp.features.SphericalHarmonicFeatures`)."""
from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ..parameters import is_concrete, value_shape
from ..validation import AKernel, Integer, OneOf, PositiveScalar, PositiveScales, Template, validated
from .base import Kernel, as_points, check_inputs, safe_sqrt as _safe_sqrt
from .stationary import Matern12, Matern32, Matern52

__all__ = ["SphereEmbedded", "Zonal", "ArcCosine", "ChordalMatern"]


class SphereEmbedded(Kernel):
    r"""A kernel of (lon, lat) inputs in degrees through the unit sphere:
    :math:`k(\mathbf x,\mathbf x') = k_0(e(\mathbf x), e(\mathbf x'))` with
    :math:`e(\lambda,\varphi) = (\cos\varphi\cos\lambda, \cos\varphi\sin\lambda, \sin\varphi)`, as the
    paper's earth-elevation model (Sun et al. 2021, §6.1). Invariant under
    :class:`~ppl_sparsegp.groups.LongitudeRotation` when ``base`` is isotropic stationary (a rotation about the
    polar axis preserves Euclidean distances).

    :param base: a kernel on 3-D inputs.
    """

    _params = ("base",)

    @validated
    def __init__(self, base: AKernel):
        if not isinstance(base, Kernel):
            raise ValueError(f"base must be a Kernel, got {type(base).__name__}")
        self._set(base=base)

    @property
    def input_dim(self):
        return 2

    @staticmethod
    def embed(X: ArrayLike) -> jax.Array:
        X = check_inputs(X, "X", 2)
        lon, lat = jnp.deg2rad(X[:, 0]), jnp.deg2rad(X[:, 1])
        return jnp.stack([jnp.cos(lat) * jnp.cos(lon), jnp.cos(lat) * jnp.sin(lon), jnp.sin(lat)], axis=1)

    def __call__(self, X1, X2=None):
        return self.base(self.embed(X1), None if X2 is None else self.embed(X2))

    def diag(self, X: ArrayLike) -> jax.Array:
        return self.base.diag(self.embed(X))

    @property
    def variance(self):
        return self.base.variance


# --- zonal kernels on the sphere (spherical harmonic features) ---------------------------------------
class Zonal(Kernel):
    r"""Base class of kernels that are zonal on the unit sphere after the map of [1]:

    .. math::

        \tilde{\mathbf x} = [\mathbf x \oslash \mathbf s,\ b],\quad r = \|\tilde{\mathbf x}\|,\quad
        \hat{\mathbf x} = \tilde{\mathbf x}/r \in S^{d-1},\ d = D + 1,\qquad
        k(\mathbf x, \mathbf x') = \sigma^2\, r^p r'^p\, \kappa(\hat{\mathbf x}\cdot\hat{\mathbf x}'),

    with p = ``order`` (0 for the kernels that are not homogeneous) and :math:`\kappa(1) = 1`. The
    scales s (``lengthscale``) and the bias b are kernel hyperparameters, so they may be templates (priors
    or Params) like any other: the map lives in the kernel because the dense Gram matrix (the exact GP,
    :func:`~ppl_sparsegp.diagnostics.adequacy`) needs it, and because ``spectral_gp`` and every
    approximation sample kernel templates. Spherical harmonic features
    (:class:`~ppl_sparsegp.features.SphericalHarmonicFeatures`) expand κ in Gegenbauer polynomials.

    Far from the data r grows: :math:`f(\mathbf x) = r^p g(\hat{\mathbf x})` grows like :math:`r^p`
    along a ray, and :math:`\hat{\mathbf x}` tends to the equator point of the ray's direction; the
    process does not revert to the prior there as a stationary GP does.

    :param variance: :math:`\sigma^2 > 0`.
    :param lengthscale: the scales s > 0, scalar or shape (D,).
    :param bias: b > 0 (the last coordinate of :math:`\tilde{\mathbf x}`).

    References:
        1. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic
           features, ICML.
    """

    _params = ("variance", "lengthscale", "bias")
    _positive = ("variance", "lengthscale", "bias")
    order: int = 0

    @validated
    def __init__(self, variance: PositiveScalar = 1.0, lengthscale: PositiveScales = 1.0,
                 bias: Annotated[Any, Template(rank=0, positive=False)] = 1.0):
        values = {}
        for name, value in (("variance", variance), ("lengthscale", lengthscale), ("bias", bias)):
            if is_concrete(value):
                value = jnp.asarray(value, dtype=jnp.result_type(float))
                if value.ndim > (1 if name == "lengthscale" else 0):
                    raise ValueError(f"{type(self).__name__}: {name} must be a scalar"
                                     f"{' or shape (D,)' if name == 'lengthscale' else ''}, got shape {value.shape}")
            values[name] = value
        self._set(**values)

    @property
    def input_dim(self):
        ls = value_shape(self.lengthscale)  # a template's prior or Param too
        return ls[0] if len(ls) == 1 else None

    def kappa(self, t: ArrayLike) -> jax.Array:
        """κ(t) on [−1, 1], κ(1) = 1 (not multiplied by σ²)."""
        raise NotImplementedError

    @validated
    def vanishing_degree(self, n: Annotated[int, Integer(0)], d: Annotated[int, Integer(2)]) -> bool:
        """Whether the Funk–Hecke coefficient a_n is exactly 0 on :math:`S^{d-1}` for every value of the
        hyperparameters (those degrees carry no feature). Default: none."""
        return False

    def to_sphere(self, X: ArrayLike) -> tuple[jax.Array, jax.Array]:
        r"""(r, x̂) of inputs X (N, D): :math:`r = \|[\mathbf x\oslash\mathbf s, b]\|` (N,) and x̂ (N, D + 1)."""
        X = as_points(check_inputs(X, "X", self.input_dim))
        dtype = jnp.result_type(X.dtype, float)
        Xt = jnp.concatenate([X / self.lengthscale,
                              jnp.broadcast_to(jnp.asarray(self.bias, dtype), X.shape[:1] + (1,))], axis=1)
        r = jnp.sqrt(jnp.sum(Xt**2, axis=1))  # ≥ b > 0
        return r, Xt / r[:, None]

    def __call__(self, X1, X2=None):
        r1, u1 = self.to_sphere(X1)
        r2, u2 = (r1, u1) if X2 is None else self.to_sphere(X2)
        if u1.shape[1] != u2.shape[1]:
            raise ValueError(f"X1 and X2 have different input dimensions: {u1.shape[1] - 1} vs {u2.shape[1] - 1}")
        t = jnp.clip(u1 @ u2.T, -1.0, 1.0)
        k = self.variance * self.kappa(t)
        if self.order:
            k = k * (r1[:, None] * r2[None, :]) ** self.order
        return k

    def diag(self, X: ArrayLike) -> jax.Array:
        r, _ = self.to_sphere(X)
        return self.variance * jnp.ones_like(r) if self.order == 0 else self.variance * r ** (2 * self.order)


def _arccos_kappa(order, t):
    """κ_p(t) of the arc-cosine kernel, normalised to κ_p(1) = 1 [Cho & Saul 2009, J_p / J_p(0)]."""
    t = jnp.clip(t, -1.0, 1.0)
    theta = jnp.arccos(t)
    s = jnp.sqrt(jnp.maximum(1.0 - t * t, 0.0))
    if order == 0:
        return (jnp.pi - theta) / jnp.pi
    if order == 1:
        return (s + (jnp.pi - theta) * t) / jnp.pi
    return (3.0 * s * t + (jnp.pi - theta) * (1.0 + 2.0 * t * t)) / (3.0 * jnp.pi)


@jax.custom_jvp
def _arccos_kappa0(t):
    return _arccos_kappa(0, t)


@jax.custom_jvp
def _arccos_kappa1(t):
    return _arccos_kappa(1, t)


@jax.custom_jvp
def _arccos_kappa2(t):
    return _arccos_kappa(2, t)


def _sin_floor(t):
    s = jnp.sqrt(jnp.maximum(1.0 - t * t, 0.0))
    return jnp.maximum(s, jnp.sqrt(jnp.finfo(jnp.result_type(t, float)).eps))


# dκ₀/dt = 1/(π sin θ) (infinite at t = 1, where κ₀ is not differentiable: floored at sin θ = √ε, which
# only matters on the diagonal, where t ≡ 1 and its tangent is rounding), dκ₁/dt = κ₀, dκ₂/dt = 4κ₁/3
_arccos_kappa0.defjvp(lambda p, tg: (_arccos_kappa0(p[0]), tg[0] / (jnp.pi * _sin_floor(jnp.clip(p[0], -1, 1)))))
_arccos_kappa1.defjvp(lambda p, tg: (_arccos_kappa1(p[0]), tg[0] * _arccos_kappa0(p[0])))
_arccos_kappa2.defjvp(lambda p, tg: (_arccos_kappa2(p[0]), tg[0] * (4.0 / 3.0) * _arccos_kappa1(p[0])))


class ArcCosine(Zonal):
    r"""The arc-cosine kernel of order p ∈ {0, 1, 2} [1] on the map of :class:`Zonal` (the kernel of an
    infinitely wide one-layer network with step, ReLU or squared-ReLU activations, with the bias folded
    in as the last input), normalised so that κ_p(1) = 1, θ = arccos t:

    .. math::

        \kappa_0 = \frac{\pi-\theta}{\pi},\quad
        \kappa_1 = \frac{\sin\theta + (\pi-\theta)\cos\theta}{\pi},\quad
        \kappa_2 = \frac{3\sin\theta\cos\theta + (\pi-\theta)(1+2\cos^2\theta)}{3\pi},

    :math:`k(\mathbf x,\mathbf x') = \sigma^2 r^p r'^p\kappa_p(\hat{\mathbf x}\cdot\hat{\mathbf x}')`,
    i.e. :math:`\sigma^2\|\tilde{\mathbf x}\|^p\|\tilde{\mathbf x}'\|^p J_p(\theta)/J_p(0)` of [1, eq. 6]
    (:math:`J_0 = \pi-\theta`, :math:`J_1 = \sin\theta + (\pi-\theta)\cos\theta`,
    :math:`J_2 = 3\sin\theta\cos\theta + (\pi-\theta)(1+2\cos^2\theta)`). Derivatives in t are the closed
    forms :math:`\kappa_0' = 1/(\pi\sin\theta)`, :math:`\kappa_1' = \kappa_0`, :math:`\kappa_2' = \tfrac43\kappa_1`,
    so gradients stay finite on the diagonal (t = 1).

    Funk–Hecke coefficients vanish structurally: order 0 for even n ≥ 2, order 1 for odd n ≥ 3, order 2
    for even n ≥ 4 (checked for d = 3…9 in the tests); those degrees carry no feature.

    :param order: p ∈ {0, 1, 2}.
    :param variance: σ² > 0.
    :param lengthscale: the input scales s > 0, scalar or shape (D,).
    :param bias: b > 0.
    :raises ValueError: for another order or a non-positive hyperparameter.

    References:
        1. Cho, Saul (2009), Kernel methods for deep learning, NeurIPS.
        2. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic
           features, ICML.
    """

    _static = ("order",)

    @validated
    def __init__(self, order: Annotated[int, OneOf(0, 1, 2)] = 1, variance: PositiveScalar = 1.0,
                 lengthscale: PositiveScales = 1.0, bias: Annotated[Any, Template(rank=0, positive=False)] = 1.0):
        if isinstance(order, bool) or order not in (0, 1, 2):
            raise ValueError(f"ArcCosine: order must be 0, 1 or 2, got {order!r}")
        object.__setattr__(self, "order", int(order))
        super().__init__(variance, lengthscale, bias)

    def kappa(self, t: ArrayLike) -> jax.Array:
        return (_arccos_kappa0, _arccos_kappa1, _arccos_kappa2)[self.order](t)  # Eq. (6) [1]

    @validated
    def vanishing_degree(self, n: Annotated[int, Integer(0)], d: Annotated[int, Integer(2)]) -> bool:
        """Order 0: even n >= 2; order 1: odd n >= 3; order 2: even n >= 4 (every d)."""
        return n >= 2 and (n % 2 == (1 if self.order == 1 else 0)) and not (self.order == 2 and n == 2)


class ChordalMatern(Zonal):
    r"""The Euclidean Matérn-ν kernel restricted to the unit sphere (the chordal distance
    :math:`\|\hat{\mathbf x} - \hat{\mathbf x}'\| = \sqrt{2 - 2t}`) on the map of :class:`Zonal`:

    .. math::

        k(\mathbf x,\mathbf x') = \sigma^2\rho_\nu\big(\sqrt{2-2\,\hat{\mathbf x}\cdot\hat{\mathbf x}'}
        \,/\,\ell\big),

    ρ_ν the Matérn profile (:class:`Matern12`, :class:`Matern32`, :class:`Matern52`). A restriction of a
    positive-definite kernel on :math:`\mathbb R^d`, so positive definite on the sphere, with every
    Funk–Hecke coefficient > 0. Not homogeneous (p = 0): its diagonal is σ².

    :param nu: 0.5, 1.5 or 2.5.
    :param variance: σ² > 0.
    :param lengthscale: the input scales s > 0, scalar or shape (D,).
    :param bias: b > 0.
    :param chordal_lengthscale: ℓ > 0, the Matérn lengthscale on the sphere (chordal distances are ≤ 2).
    :raises ValueError: for another ν or a non-positive hyperparameter.

    References:
        1. Rasmussen, Williams (2006), Gaussian Processes for Machine Learning, §4.2.1.
        2. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic
           features, ICML.
    """

    _params = ("variance", "lengthscale", "bias", "chordal_lengthscale")
    _positive = ("variance", "lengthscale", "bias", "chordal_lengthscale")
    _static = ("nu",)

    @validated
    def __init__(self, nu: Annotated[float, OneOf(0.5, 1.5, 2.5)] = 1.5, variance: PositiveScalar = 1.0,
                 lengthscale: PositiveScales = 1.0, bias: Annotated[Any, Template(rank=0, positive=False)] = 1.0,
                 chordal_lengthscale: PositiveScalar = 1.0):
        if nu not in (0.5, 1.5, 2.5):
            raise ValueError(f"ChordalMatern: nu must be 0.5, 1.5 or 2.5, got {nu!r}")
        if is_concrete(chordal_lengthscale):
            chordal_lengthscale = jnp.asarray(chordal_lengthscale, dtype=jnp.result_type(float))
            if chordal_lengthscale.ndim != 0:
                raise ValueError("ChordalMatern: chordal_lengthscale must be a scalar, got shape "
                                 f"{chordal_lengthscale.shape}")
        object.__setattr__(self, "nu", float(nu))
        super().__init__(variance, lengthscale, bias)
        self._set(chordal_lengthscale=chordal_lengthscale)

    def kappa(self, t: ArrayLike) -> jax.Array:
        tau = _safe_sqrt(2.0 - 2.0 * jnp.clip(t, -1.0, 1.0)) / self.chordal_lengthscale
        return {0.5: Matern12, 1.5: Matern32, 2.5: Matern52}[self.nu].profile(self, tau)
