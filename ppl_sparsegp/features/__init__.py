"""Inducing features: one file per family, ``Kuu``/``Kuf`` registered next to each class."""
from .base import Dispatcher, InducingFeature, Kuf, Kuu
from .combinations import AdditiveFeatures, KroneckerFeatures
from .fourier import FourierFeatures
from .harmonic import HarmonicFeatures, block_diagonal_covariance
from .inducing_points import InducingPoints
from .orthogonal import AdditiveOrthogonal, HermiteFeatures, TrigonometricFeatures
from .random_fourier import RandomFourierFeatures

__all__ = ["Dispatcher", "InducingFeature", "Kuf", "Kuu", "InducingPoints", "FourierFeatures",
           "AdditiveFeatures", "KroneckerFeatures", "AdditiveOrthogonal", "HermiteFeatures",
           "TrigonometricFeatures", "HarmonicFeatures", "block_diagonal_covariance", "RandomFourierFeatures"]

# one-pass statistics live in .fourier_statistics (imported on use: it builds on ppl_sparsegp.collapsed)
