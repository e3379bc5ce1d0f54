r"""Integral-transform features: Gaussian-windowed frequency features for the squared-exponential kernel
(the frequency inducing features of Lázaro-Gredilla & Figueiras-Vidal [1]; the integral transform of the
overview [2, §2]).

Each inducing variable is the integral of f against a Gaussian window modulated by a cosine,

.. math::

    u_m = \int_{\mathbb R^D} f(\mathbf x)\,\mathcal N(\mathbf x;\boldsymbol\mu_m,\Lambda)\,
    \cos(\boldsymbol\omega_m^\top\mathbf x + \varphi_m)\,d\mathbf x,

with centres :math:`\boldsymbol\mu_m`, angular frequencies :math:`\boldsymbol\omega_m`, phases
:math:`\varphi_m` and one diagonal window :math:`\Lambda = \operatorname{diag}(\lambda_1, \dots,
\lambda_D)`, :math:`\lambda_d = c_d^2` (``window`` is c). A window of width 0 with
:math:`\boldsymbol\omega_m = 0`, :math:`\varphi_m = 0` gives inducing points at the centres.

**Derivation (SE kernel).** Let :math:`k(\mathbf x,\mathbf x') = \sigma^2\exp(-\frac12(\mathbf x-\mathbf x')^\top
L^{-1}(\mathbf x-\mathbf x'))`, :math:`L = \operatorname{diag}(\ell_d^2)`. Its spectral representation
(:mod:`ppl_sparsegp.kernels`) is :math:`k(\mathbf x,\mathbf x') = \sigma^2\,\mathbb E_{\mathbf s}
[e^{i\mathbf s^\top(\mathbf x-\mathbf x')}]`, :math:`\mathbf s\sim\mathcal N(0, L^{-1})`, and the Gaussian
characteristic function is :math:`\int\mathcal N(\mathbf x;\boldsymbol\mu,\Lambda)e^{i\boldsymbol\nu^\top
\mathbf x}d\mathbf x = e^{i\boldsymbol\nu^\top\boldsymbol\mu - \frac12\boldsymbol\nu^\top\Lambda
\boldsymbol\nu}`. For two windows :math:`(\boldsymbol\mu,\Lambda)`, :math:`(\boldsymbol\mu',\Lambda')` and
frequencies :math:`\boldsymbol\nu, \boldsymbol\nu'`, exchanging the integrals,

.. math::

    E = \iint\mathcal N(\mathbf z;\boldsymbol\mu,\Lambda)\,\mathcal N(\mathbf z';\boldsymbol\mu',\Lambda')\,
    k(\mathbf z,\mathbf z')\,e^{i(\boldsymbol\nu^\top\mathbf z + \boldsymbol\nu'^\top\mathbf z')}\,
    d\mathbf z\,d\mathbf z'
    = \sigma^2\,\mathbb E_{\mathbf s}\big[e^{i(\boldsymbol\nu+\mathbf s)^\top\boldsymbol\mu
      - \frac12(\boldsymbol\nu+\mathbf s)^\top\Lambda(\boldsymbol\nu+\mathbf s)
      + i(\boldsymbol\nu'-\mathbf s)^\top\boldsymbol\mu' - \frac12(\boldsymbol\nu'-\mathbf s)^\top
      \Lambda'(\boldsymbol\nu'-\mathbf s)}\big].

Per dimension (everything diagonal) the exponent is :math:`-\frac12 a_d s_d^2 + b_d s_d + c_d` with
:math:`a_d = \ell_d^2 + \lambda_d + \lambda'_d` (after including the density of :math:`s_d`,
:math:`\ell_d(2\pi)^{-1/2}e^{-\ell_d^2 s_d^2/2}`), :math:`b_d = \lambda'_d\nu'_d - \lambda_d\nu_d +
i(\mu_d - \mu'_d)`, :math:`c_d = -\frac12(\lambda_d\nu_d^2 + \lambda'_d\nu_d'^2) + i(\nu_d\mu_d +
\nu'_d\mu'_d)`, and :math:`\int\ell_d(2\pi)^{-1/2}e^{-a_d s^2/2 + b_d s}ds = \ell_d a_d^{-1/2}
e^{b_d^2/(2a_d)}`. Hence, with :math:`\beta_d = \lambda'_d\nu'_d - \lambda_d\nu_d` and
:math:`\delta_d = \mu_d - \mu'_d`,

.. math::

    E = \sigma^2\prod_d\frac{\ell_d}{\sqrt{a_d}}\,
    \exp\Big(\sum_d\frac{\beta_d^2 - \delta_d^2}{2a_d} - \frac{\lambda_d\nu_d^2 + \lambda'_d\nu_d'^2}{2}\Big)
    \exp\Big(i\sum_d\Big[\frac{\beta_d\delta_d}{a_d} + \nu_d\mu_d + \nu'_d\mu'_d\Big]\Big),

and :math:`J(\boldsymbol\nu,\boldsymbol\nu',\psi) = \Re(e^{i\psi}E)` is the same integral with
:math:`\cos(\boldsymbol\nu^\top\mathbf z + \boldsymbol\nu'^\top\mathbf z' + \psi)` in place of the
exponential. With :math:`\cos a\cos b = \frac12[\cos(a+b) + \cos(a-b)]`:

* :math:`K_{uu}[m, m'] = \frac12\big[J(\boldsymbol\omega_m, \boldsymbol\omega_{m'}, \varphi_m+\varphi_{m'})
  + J(\boldsymbol\omega_m, -\boldsymbol\omega_{m'}, \varphi_m-\varphi_{m'})\big]` with
  :math:`\Lambda' = \Lambda` (so :math:`a_d = \ell_d^2 + 2\lambda_d`);
* :math:`K_{uf}[m](\mathbf x)`: the limit :math:`\Lambda'\to 0`, :math:`\boldsymbol\mu' = \mathbf x`,
  :math:`\boldsymbol\nu' = 0` (a point evaluation), where both terms coincide:

.. math::

    K_{uf}[m](\mathbf x) = \sigma^2\prod_d\frac{\ell_d}{\sqrt{\ell_d^2+\lambda_d}}
    \exp\Big(-\sum_d\frac{(x_d-\mu_{md})^2 + \ell_d^2\lambda_d\,\omega_{md}^2}{2(\ell_d^2+\lambda_d)}\Big)
    \cos\Big(\sum_d\frac{\omega_{md}(\lambda_d x_d + \ell_d^2\mu_{md})}{\ell_d^2+\lambda_d} + \varphi_m\Big),

eq. (10) of [1] in this library's angular-frequency convention. :math:`K_{uu}` is a Gram matrix of
:math:`L^2` inner products under the kernel, so PSD; it is held as a :class:`~ppl_sparsegp.linalg.Dense`
operator with a relative jitter, as for inducing points. Both are checked against numerical quadrature in
1-D and 2-D (``tests/features/test_integral_transform.py``). Cost: O(M²D) for Kuu, O(NMD) for Kuf; the conditional,
the KL and the collapsed bound are the library's generic ones.

References:
    1. Lázaro-Gredilla, Figueiras-Vidal (2009), Inter-domain Gaussian processes for sparse inference using
       inducing features, NeurIPS 22.
    2. ``shared/papers/inducing_features_overview.txt`` (the integral transform :math:`L_m[f] = \int f\phi_m`).
"""
from __future__ import annotations

from typing import Annotated, Any

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike
from numpyro.distributions import Distribution

from ..covariances import Kuf, Kuu
from ..kernels import SquaredExponential, check_inputs
from ..linalg import Dense
from ..parameters import Param, check_finite, check_positive, is_concrete
from ..validation import OrNone, Real, Template, validated
from .base import InducingFeature

__all__ = ["IntegralTransformFeatures"]

#: a field of any shape (the constructor checks the shapes against each other)
AnyField = Annotated[Any, Template(rank=None, positive=False)]


def _shape(x):
    """The shape of an array, a tracer or a Param's initial value."""
    return tuple(np.shape(x.init) if isinstance(x, Param) else jnp.shape(x))


def _value(x):
    """The concrete array of a field (a Param's init), or None for a prior or a tracer."""
    if isinstance(x, Param):
        return np.asarray(x.init)
    return np.asarray(x) if is_concrete(x) else None


class IntegralTransformFeatures(InducingFeature):
    r"""Gaussian-windowed frequency features :math:`u_m = \int f(\mathbf x)\,\mathcal N(\mathbf x;
    \boldsymbol\mu_m, \operatorname{diag}(c^2))\cos(\boldsymbol\omega_m^\top\mathbf x + \varphi_m)\,d\mathbf x`
    for the :class:`~ppl_sparsegp.kernels.SquaredExponential` kernel [1] (closed-form Kuu and Kuf: module
    docstring).

    :math:`K_{uu}` is a :class:`~ppl_sparsegp.linalg.Dense` operator (M, M) with relative jitter;
    :math:`K_{uf}` (M, N) is the windowed, modulated kernel. Any field may be a fixed array, a
    :class:`~ppl_sparsegp.Param` (optimised by SVI, sites ``feature_<field>``) or a prior, except
    ``frequencies``, whose shape fixes M and D (an array or a Param).

    :param frequencies: :math:`\boldsymbol\omega_m`, shape (M, D) (angular frequencies).
    :param centres: :math:`\boldsymbol\mu_m`, shape (M, D).
    :param window: the window's standard deviations c > 0, a scalar or shape (D,) (:math:`\Lambda =
        \operatorname{diag}(c^2)`, shared by all features).
    :param phases: :math:`\varphi_m`, shape (M,) (default 0: every feature a cosine; mix 0 and π/2 to
        get sines).
    :param jitter: relative jitter added to the diagonal of Kuu (default 1e-10 in float64, 1e-5 in float32).
    :raises ValueError: for shapes that do not match, non-finite values or a window ≤ 0.

    References:
        1. Lázaro-Gredilla, Figueiras-Vidal (2009), Inter-domain Gaussian processes for sparse inference
           using inducing features, NeurIPS 22.
    """

    _params = ("frequencies", "centres", "window", "phases")
    _static = ("jitter",)
    _positive = ("window",)

    @validated
    def __init__(self, frequencies: AnyField, centres: AnyField, window: Annotated[Any, Template(rank=(0, 1))] = 1.0,
                 phases: Annotated[Any, OrNone(Template(rank=None, positive=False))] = None,
                 jitter: Annotated[Any, OrNone(Real(0.0, None))] = None):
        W, C = _value(frequencies), _value(centres)
        if W is not None:
            if W.ndim != 2 or W.shape[0] == 0:
                raise ValueError(f"frequencies must have shape (M, D) with M >= 1, got shape {W.shape}")
            check_finite(W, "frequencies")
        if C is not None:
            if C.ndim != 2 or (W is not None and C.shape != W.shape):
                raise ValueError(f"centres must have the shape (M, D) of frequencies "
                                 f"{None if W is None else W.shape}, got shape {C.shape}")
            check_finite(C, "centres")
        if isinstance(frequencies, Distribution):
            raise ValueError("frequencies must be an array or a Param (their shape fixes M and D), got a prior")
        shape = _shape(frequencies)
        if len(shape) != 2:
            raise ValueError(f"frequencies must have shape (M, D), got shape {shape}")
        c = _value(window)
        if c is not None:
            if c.ndim > 1 or (c.ndim == 1 and c.shape[0] != shape[1]):
                raise ValueError(f"window must be a scalar or shape ({shape[1]},), got shape {c.shape}")
            check_finite(c, "window")
            check_positive(c, "window")
        if phases is None:
            phases = jnp.zeros(shape[0], dtype=jnp.result_type(float))
        p = _value(phases)
        if p is not None:
            if p.shape != (shape[0],):
                raise ValueError(f"phases must have shape ({shape[0]},) (one per feature), got shape {p.shape}")
            check_finite(p, "phases")
        if jitter is not None and not (np.isfinite(jitter) and jitter >= 0):
            raise ValueError(f"jitter must be a non-negative number, got {jitter!r}")
        as_array = lambda x: jnp.asarray(x, dtype=jnp.result_type(float)) if is_concrete(x) else x  # noqa: E731
        self._set(frequencies=as_array(frequencies), centres=as_array(centres), window=as_array(window),
                  phases=as_array(phases), jitter=jitter)

    @property
    def num_features(self):
        return _shape(self.frequencies)[0]

    @property
    def input_dim(self):
        """D, the number of input dimensions."""
        return _shape(self.frequencies)[1]

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        X = check_inputs(X, name)
        if X.shape[1] != self.input_dim:
            raise ValueError(f"{name} has {X.shape[1]} input dimensions but the features have {self.input_dim}: "
                             f"give frequencies and centres of shape (M, {X.shape[1]})")
        return X

    def relative_jitter(self, dtype: DTypeLike):
        if self.jitter is not None:
            return self.jitter
        return 1e-10 if jnp.finfo(dtype).bits == 64 else 1e-5

    def _scales(self, kernel):
        """ℓ² and λ = c², each (D,)."""
        D = self.input_dim
        n_ell = jnp.size(kernel.lengthscale)
        if n_ell not in (1, D):
            raise ValueError(f"IntegralTransformFeatures in D = {D} input dimensions with a kernel of {n_ell} "
                             f"lengthscales ({type(kernel).__name__}, shape {jnp.shape(kernel.lengthscale)}): "
                             f"give the kernel one lengthscale or {D} (one per input dimension), or frequencies and "
                             f"centres of shape (M, {n_ell})")
        ell2 = jnp.broadcast_to(jnp.asarray(kernel.lengthscale), (D,)) ** 2
        lam = jnp.broadcast_to(jnp.asarray(self.window), (D,)) ** 2
        return ell2, lam


def _window_cross(kernel, ell2, lam, mu, nu, mu2, nu2, psi):
    r""":math:`J = \Re(e^{i\psi}E)` of the module docstring for two windows of the same Λ, broadcast over
    the leading axes of mu, nu (..., D) and mu2, nu2 (..., D); psi broadcast likewise."""
    a = ell2 + 2.0 * lam
    beta = lam * (nu2 - nu)
    delta = mu - mu2
    log_amp = jnp.sum((beta**2 - delta**2) / (2.0 * a) - 0.5 * lam * (nu**2 + nu2**2), -1)
    phase = jnp.sum(beta * delta / a + nu * mu + nu2 * mu2, -1)
    norm = jnp.prod(jnp.sqrt(ell2 / a))
    return kernel.variance * norm * jnp.exp(log_amp) * jnp.cos(phase + psi)


@Kuu.register(IntegralTransformFeatures, SquaredExponential)
def _kuu_integral_transform(feature, kernel):
    ell2, lam = feature._scales(kernel)
    W, mu, phi = feature.frequencies, feature.centres, feature.phases
    args = (mu[:, None, :], W[:, None, :], mu[None, :, :])
    K = 0.5 * (_window_cross(kernel, ell2, lam, *args, W[None, :, :], phi[:, None] + phi[None, :])  # cos(a+b)
               + _window_cross(kernel, ell2, lam, *args, -W[None, :, :], phi[:, None] - phi[None, :]))  # cos(a-b)
    eps = feature.relative_jitter(K.dtype) * jnp.mean(jnp.diagonal(K))
    return Dense(0.5 * (K + K.T), jitter=eps)


@Kuf.register(IntegralTransformFeatures, SquaredExponential)
def _kuf_integral_transform(feature, kernel, X):
    X = feature.check_inputs(X)
    ell2, lam = feature._scales(kernel)
    W, mu, phi = feature.frequencies, feature.centres, feature.phases
    s = ell2 + lam
    diff = X[None, :, :] - mu[:, None, :]                                       # (M, N, D)
    log_amp = -0.5 * jnp.sum(diff**2 / s, -1) - 0.5 * jnp.sum(W**2 * ell2 * lam / s, -1)[:, None]
    phase = jnp.sum(W[:, None, :] * (lam * X[None, :, :] + ell2 * mu[:, None, :]) / s, -1) + phi[:, None]
    return kernel.variance * jnp.prod(jnp.sqrt(ell2 / s)) * jnp.exp(log_amp) * jnp.cos(phase)  # Eq. (10) [1]
