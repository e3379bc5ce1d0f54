"""The helpers the variational orthogonal families share (:mod:`~ppl_sparsegp.features.hermite`,
:mod:`~ppl_sparsegp.features.trigonometric`): argument checks and the ``from_data`` size rule. Internal:
no public API."""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from numpyro.distributions import Distribution

from ..covariances import Kuf
from ..kernels import check_inputs
from ..parameters import Param, check_finite, check_positive, is_concrete
from .base import TooManyFeatures
from .fourier_sizes import lengthscale_range

INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def check_num_features(num_features):
    if isinstance(num_features, bool) or not isinstance(num_features, (int, np.integer)) or num_features < 1:
        raise ValueError(f"num_features must be a positive int, got {num_features!r}")
    return int(num_features)


def scalar_field(value, name, positive=False):
    """A scalar parameter field: a number (validated), a Distribution or a Param (positive support)."""
    if isinstance(value, Param):
        value.resolved(positive, name)  # a positive field refuses a constraint that leaves the positive reals
        if jnp.shape(value.init) != ():
            raise ValueError(f"{name} must be a scalar, got shape {jnp.shape(value.init)}")
        return value
    if isinstance(value, Distribution) or not is_concrete(value):
        return value
    value = jnp.asarray(value, dtype=jnp.result_type(float))
    if value.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {value.shape}")
    check_finite(value, name)
    if positive:
        check_positive(value, name)
    return value


def initial_value(value):
    """The concrete value of a field for validation (a Param's init; None for a prior or a tracer)."""
    if isinstance(value, Param):
        return float(value.init)
    return float(value) if is_concrete(value) else None


def scalar_lengthscale(kernel):
    return jnp.reshape(jnp.asarray(kernel.lengthscale), ())


def one_column(feature, X, name):
    X = check_inputs(X, name)
    if X.shape[1] != 1:
        raise ValueError(f"{name} must have one input column for {type(feature).__name__}, got "
                         f"{X.shape[1]}; use AdditiveOrthogonal for D > 1")
    return X


def rule_inputs(cls, x, lengthscale, tolerance, quantile):
    """The checked 1-D inputs and ℓ_min of a ``from_data`` size rule."""
    x = np.asarray(x, dtype=float).reshape(-1)
    if x.size < 2 or not np.all(np.isfinite(x)) or np.ptp(x) == 0:
        raise ValueError("x must hold at least two distinct finite inputs")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    lo, _ = lengthscale_range(lengthscale, None, quantile)
    if np.ndim(lo):
        raise ValueError(f"{cls.__name__} are 1-D: give one lengthscale (or a scalar prior)")
    return x, float(lo)


def fewest_resolving(build, kernel, x, M, tolerance, max_features, refusal):
    """The fewest features of a ``from_data`` size rule: the residual 1 − Σ_{m<M'} K_uf[m](x)²/v (kernel
    of variance 1) at 257 quantiles of x (the extremes included) only decreases with M', and the first M'
    functions of ``build(M)`` do not depend on M, so one evaluation at an upper bound (doubled from M up
    to ``max_features``) gives every M'. ``refusal(worst)`` is the message of the
    :class:`~ppl_sparsegp.features.TooManyFeatures` raised when ``max_features`` functions still leave
    ``worst`` unresolved."""
    M = min(M, max_features)
    points = np.quantile(x, np.linspace(0.0, 1.0, 257))[:, None]
    while True:
        worst = np.max(1.0 - np.cumsum(np.asarray(Kuf(build(M), kernel, points)) ** 2, axis=0), axis=1)
        if worst[-1] <= tolerance:
            return int(np.argmax(worst <= tolerance)) + 1  # worst[j]: after j + 1 functions
        if M >= max_features:
            raise TooManyFeatures(refusal(worst[-1]), None, max_features)
        M = min(2 * M, max_features)

