"""The registry of feature families: every concrete :class:`~ppl_sparsegp.features.InducingFeature` class
with a test-sized instance on a kernel it serves, and inputs where that instance is valid.

:data:`FAMILIES` is what code that must treat every family alike iterates over: the cross-family tests
(``tests/features/test_registry.py``, the registry part of ``tests/test_properties.py``) and
:func:`~ppl_sparsegp.fit_spherical`'s list of families with one-pass statistics. ``tests/features/test_registry.py``
checks that every concrete subclass of the base class that the package exports is registered here, so a
new family cannot be left out of them: a new family adds its ``Family`` entry below.

What a generic module needs to know of a family is an attribute or a method of the class (the base's
default, overridden where the family differs): ``covariance_of_prior``, ``monte_carlo``,
``one_pass_with_fixed_map``, ``kuf_kernel_fields``, ``check_kernel``, ``check_free_hyperparameters``,
``refinement_note``, ``refinement_advice``, ``adequacy_advice``, ``inducing_inputs``, never its name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..groups import Negation
from ..kernels import Additive, ChordalMatern, Matern12, Matern32, Matern52, Product, SquaredExponential
from .activation import ActivationFeatures
from .combinations import AdditiveFeatures, AdditiveOrthogonal, KroneckerFeatures
from .fourier import FourierFeatures
from .harmonic import HarmonicFeatures
from .hermite import HermiteFeatures
from .inducing_points import InducingPoints
from .integral_transform import IntegralTransformFeatures
from .random_fourier import ImportanceFourierFeatures, RandomFourierFeatures
from .spherical import SphericalHarmonicFeatures
from .trigonometric import TrigonometricFeatures

__all__ = ["FAMILIES"]  # Family: the entries' type (built here only)


@dataclass(frozen=True)
class Family:
    """One feature family: its class, a kernel it serves and a test-sized instance on such a kernel.

    :ivar feature_class: the concrete :class:`~ppl_sparsegp.features.InducingFeature` subclass.
    :ivar kernel: ``() -> Kernel``, a concrete kernel of a kind the family serves.
    :ivar example: ``kernel -> feature``, a test-sized instance (at most 50 features) for that kind of kernel.
    :ivar inputs: ``(numpy Generator, n) -> (n, D) array``, inputs where the instance is valid.
    """

    feature_class: type
    kernel: Callable
    example: Callable
    inputs: Callable

    @property
    def name(self) -> str:
        return self.feature_class.__name__

    def instance(self, kernel=None) -> tuple:
        """``(feature, kernel)``: :attr:`example` on ``kernel`` (default :attr:`kernel`)."""
        kernel = self.kernel() if kernel is None else kernel
        return self.example(kernel), kernel


def _interval(rng, n):
    return np.sort(rng.uniform(0.0, 1.0, n))[:, None]


def _square(rng, n):
    return rng.uniform(0.0, 1.0, (n, 2))


def _normal(D):
    return lambda rng, n: rng.normal(size=(n, D))


def _fixed(shape, scale=1.0, seed=0):
    """A fixed array of normal draws (an instance's frequencies or points: the same every call)."""
    return scale * np.random.default_rng(seed).normal(size=shape)


#: Every concrete feature family, one ``Family`` each (``tests/features/test_registry.py`` checks it is complete).
FAMILIES: tuple = (
    Family(InducingPoints, lambda: Matern52(1.0, 0.3),
           lambda k: InducingPoints(np.linspace(0.0, 1.0, 8)[:, None]), _interval),
    Family(FourierFeatures, lambda: Matern32(1.0, 0.3), lambda k: FourierFeatures(-0.5, 1.5, 8), _interval),
    Family(AdditiveFeatures, lambda: Additive([Matern32(1.0, 0.4), Matern52(0.5, 0.6)]),
           lambda k: AdditiveFeatures([FourierFeatures(-0.5, 1.5, 6)] * len(k.kernels)), _square),
    Family(KroneckerFeatures, lambda: Product([Matern32(1.0, 0.5), Matern12(1.0, 0.8)]),
           lambda k: KroneckerFeatures([FourierFeatures(-0.5, 1.5, 4)] * len(k.kernels)), _square),
    Family(AdditiveOrthogonal, lambda: Additive([SquaredExponential(1.0, 0.8), SquaredExponential(0.5, 1.2)]),
           lambda k: AdditiveOrthogonal([HermiteFeatures(8), TrigonometricFeatures(9, 4.0)]), _normal(2)),
    Family(HermiteFeatures, lambda: SquaredExponential(1.0, 0.8), lambda k: HermiteFeatures(10), _normal(1)),
    Family(TrigonometricFeatures, lambda: Matern52(1.0, 0.8), lambda k: TrigonometricFeatures(11, 4.0), _normal(1)),
    Family(HarmonicFeatures, lambda: SquaredExponential(1.0, 1.0),
           lambda k: HarmonicFeatures(Negation(), _fixed((6, 2))), _normal(2)),
    Family(RandomFourierFeatures, lambda: SquaredExponential(1.0, 0.3),
           lambda k: RandomFourierFeatures(_fixed((10, 1))), _interval),
    Family(ImportanceFourierFeatures, lambda: SquaredExponential(1.0, 0.3),
           lambda k: ImportanceFourierFeatures(_fixed((10, 1), 1 / 0.2), SquaredExponential(1.0, 0.2)), _interval),
    Family(SphericalHarmonicFeatures, lambda: ChordalMatern(1.5, 1.0, 1.0, 1.0, 1.0),
           lambda k: SphericalHarmonicFeatures(2, 3, kernel=k), lambda rng, n: rng.uniform(-1.0, 1.0, (n, 2))),
    Family(IntegralTransformFeatures, lambda: SquaredExponential(1.0, 0.3),
           lambda k: IntegralTransformFeatures(np.linspace(0.0, 6.0, 6)[:, None], np.linspace(0.0, 1.0, 6)[:, None],
                                               0.2, np.tile([0.0, 0.5 * np.pi], 3)), _interval),
    Family(ActivationFeatures, lambda: ChordalMatern(1.5, 1.0, 1.0, 1.0, 1.0),
           lambda k: ActivationFeatures.from_kernel(k, 2, 20, activation="erf", scale=2.0, shift=0.3,
                                                    tolerance=1e-8, learnable=False),
           lambda rng, n: rng.uniform(-1.0, 1.0, (n, 2))),
)

