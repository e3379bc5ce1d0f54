"""Inducing features: one file per family, ``Kuu``/``Kuf`` registered next to each class."""
from .base import Dispatcher, InducingFeature, Kuf, Kuu
from .combinations import AdditiveFeatures, KroneckerFeatures
from .fourier import FourierFeatures
from .inducing_points import InducingPoints
from .orthogonal import AdditiveOrthogonal, HermiteFeatures, TrigonometricFeatures

__all__ = ["Dispatcher", "InducingFeature", "Kuf", "Kuu", "InducingPoints", "FourierFeatures",
           "AdditiveFeatures", "KroneckerFeatures", "AdditiveOrthogonal", "HermiteFeatures",
           "TrigonometricFeatures"]
