r"""A spectral GP prior primitive for people's own NumPyro models.

``f = spectral_gp("f", feature, kernel, X)`` adds the inducing variables of any feature family as one
sample site and returns the latent function at X, the way ``numpyro.contrib.hsgp`` does for its basis::

    def model(X, y=None):
        ell = numpyro.sample("ell", dist.Gamma(2.0, 2.0))
        f = spectral_gp("f", FourierFeatures(a=-1, b=2, num_frequencies=30), Matern32(lengthscale=ell), X)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

Whitened (default): :math:`\mathbf v\sim\mathcal N(0, I_{M'})`, :math:`\mathbf u = R\mathbf v`;
centred: :math:`\mathbf u\sim\mathcal N(0, K_{uu})`. The returned f is
:math:`K_{fu}K_{uu}^{-1}\mathbf u`, the projected process [1, §2.4.3]; ``return_variance=True`` also returns
the residual :math:`k_{nn} - [K_{fu}K_{uu}^{-1}K_{uf}]_{nn}`, which an expected log-likelihood can use.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpyro

from .conditionals import conditional
from .features.base import Kuu
from .gaussian import StructuredNormal
from .kernels import check_inputs
from .linalg import Identity

__all__ = ["inducing_prior", "spectral_gp"]


def inducing_prior(name: str, feature, kernel, *, whiten: bool = True, Kmm=None):
    """Sample the inducing variables: site ``f"{name}_v"`` (whitened) or ``f"{name}_u"`` (centred).

    :returns: ``(value, Kmm)``.
    """
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    dtype = Kmm.dtype
    if whiten:
        prior = StructuredNormal(jnp.zeros(Kmm.sqrt_cols, dtype), Identity(Kmm.sqrt_cols, dtype=dtype))
        return numpyro.sample(f"{name}_v", prior), Kmm
    return numpyro.sample(f"{name}_u", StructuredNormal(jnp.zeros(Kmm.size, dtype), Kmm)), Kmm


def spectral_gp(name: str, feature, kernel, X, *, whiten: bool = True, return_variance: bool = False):
    """Add a latent GP with the given inducing features to the current model; return f(X).

    :param name: prefix of the sample site.
    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (concrete, not a template).
    :param kernel: a concrete kernel (its hyperparameters may be sampled values).
    :param X: inputs (N, D).
    :param whiten: sample v ~ N(0, I) with u = R v (default) or u ~ N(0, Kuu).
    :param return_variance: also return the residual variance at X.
    """
    X = feature.check_inputs(check_inputs(X, "X"))
    value, Kmm = inducing_prior(name, feature, kernel, whiten=whiten)
    mean, var = conditional(feature, kernel, X, value, whiten=whiten, Kmm=Kmm)
    return (mean, var) if return_variance else mean
