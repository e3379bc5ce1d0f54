"""Inducing features: one file per family, its ``Kuu``/``Kuf`` (and where needed ``conditional``,
``sufficient_statistics``) registered next to the class into :mod:`ppl_sparsegp.covariances`. A family's
file must be imported here, or its registrations never run."""
# import-time registrations: VFF's one-pass sufficient_statistics; the float32-on-GPU check of every Kuu
from . import float32, fourier_statistics  # noqa: F401
from .activation import ActivationFeatures
from .base import InducingFeature, OutsideDomainWarning, TooManyFeatures
from .combinations import AdditiveFeatures, AdditiveOrthogonal, KroneckerFeatures
from .fourier import FourierFeatures
from .fourier_sizes import frequencies_needed, harmonics_needed, lengthscale_range, resolved_frequency, spectral_tail
from .harmonic import HarmonicFeatures
from .hermite import HermiteFeatures
from .inducing_points import InducingPoints
from .integral_transform import IntegralTransformFeatures
from .random_fourier import ImportanceFourierFeatures, RandomFourierFeatures
from .registry import FAMILIES
from .spherical import SphericalHarmonicFeatures
from .trigonometric import TrigonometricFeatures

__all__ = ["InducingFeature", "OutsideDomainWarning", "TooManyFeatures", "InducingPoints", "FourierFeatures",
           "AdditiveFeatures", "KroneckerFeatures", "AdditiveOrthogonal", "HermiteFeatures", "TrigonometricFeatures",
           "HarmonicFeatures", "RandomFourierFeatures", "ImportanceFourierFeatures", "SphericalHarmonicFeatures",
           "IntegralTransformFeatures", "ActivationFeatures", "FAMILIES", "spectral_tail", "resolved_frequency",
           "frequencies_needed", "harmonics_needed", "lengthscale_range"]
