"""ppl_sparsegp: large-scale Gaussian processes in NumPyro through spectral and inter-domain features.

Every approximation is a NumPyro model/guide pair whose Kuu/Kuf come from one feature module
(:mod:`ppl_sparsegp.features`); SVI, NUTS/HMC and SteinVI run through NumPyro's own engines.
"""
from . import datasets, diagnostics, groups, kernels, likelihoods, linalg
from ._module import Param
from .approximations import CollapsedGP, GPModel, SparseGP
from .collapsed import collapsed_elbo, exact_log_marginal_likelihood
from .conditionals import conditional
from .features import (AdditiveFeatures, FourierFeatures, HarmonicFeatures, HermiteFeatures, InducingFeature,
                       InducingPoints, KroneckerFeatures, Kuf, Kuu, RandomFourierFeatures, TrigonometricFeatures)
from .gaussian import StructuredNormal, gaussian_kl
from .kernels import Additive, Matern12, Matern32, Matern52, Product, SquaredExponential
from .prior import spectral_gp
from . import multiclass, spectrum  # noqa: E402  (after the core: they build on it)
from .spectrum import SparseSpectrumGP  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "datasets", "diagnostics", "kernels", "likelihoods", "linalg", "Param", "GPModel", "SparseGP", "CollapsedGP",
    "collapsed_elbo",
    "exact_log_marginal_likelihood", "conditional", "InducingFeature", "InducingPoints", "Kuu", "Kuf",
    "StructuredNormal", "gaussian_kl", "Additive", "Matern12", "Matern32", "Matern52", "Product",
    "SquaredExponential", "spectral_gp", "groups", "multiclass", "spectrum", "SparseSpectrumGP",
    "FourierFeatures", "AdditiveFeatures", "KroneckerFeatures", "HermiteFeatures", "TrigonometricFeatures",
    "HarmonicFeatures", "RandomFourierFeatures",
]
