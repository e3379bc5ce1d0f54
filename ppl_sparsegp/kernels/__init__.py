r"""Kernels as immutable pytrees, one file per kind: :mod:`~ppl_sparsegp.kernels.base` (the
:class:`Kernel` base class and :func:`check_inputs`), :mod:`~ppl_sparsegp.kernels.stationary` (squared
exponential, Matérn), :mod:`~ppl_sparsegp.kernels.periodic`, :mod:`~ppl_sparsegp.kernels.zonal` (kernels on
the sphere) and :mod:`~ppl_sparsegp.kernels.combinations` (sums, products, the constant diagonal).

Every kernel has ``variance`` :math:`\sigma^2` and ``lengthscale`` :math:`\ell` (a scalar, or one per
input dimension), evaluates its Gram matrix ``k(X1, X2)`` for inputs of shape (N, D) and its ``diag(X)``;
a stationary one also has ``spectral_density(omega)`` and ``sample_frequencies(rng_key, n, input_dim)``.

**Spectral convention (the only one in the library).** For a stationary kernel
:math:`k(\mathbf x, \mathbf x') = \kappa(\mathbf r)`, :math:`\mathbf r = \mathbf x - \mathbf x'`,

.. math::

    s(\boldsymbol\omega) = \int_{\mathbb R^D} \kappa(\mathbf r)\, e^{-i\boldsymbol\omega^\top\mathbf r}\,
    d\mathbf r, \qquad
    \kappa(\mathbf r) = (2\pi)^{-D}\int s(\boldsymbol\omega)\, e^{i\boldsymbol\omega^\top\mathbf r}\,
    d\boldsymbol\omega,

with angular frequency :math:`\boldsymbol\omega`. The normalised spectral density that random Fourier
features sample from is :math:`p(\boldsymbol\omega) = s(\boldsymbol\omega) / ((2\pi)^D\sigma^2)`, so
:math:`\kappa(\mathbf r) = \sigma^2\,\mathbb E_p[\cos(\boldsymbol\omega^\top\mathbf r)]`. In 1-D this is
the convention of the VFF paper [1], e.g. Matérn-1/2: :math:`s(\omega) = 2\sigma^2\lambda/(\lambda^2+\omega^2)`.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Rasmussen, Williams (2006), Gaussian Processes for Machine Learning, §4.2.
"""
from .base import Kernel, as_points, check_inputs  # noqa: F401  (as_points: kept importable from here)
from .combinations import Additive, Product, constant_kernel_diagonal
from .periodic import Periodic
from .stationary import Matern12, Matern32, Matern52, SquaredExponential, Stationary
from .zonal import ArcCosine, ChordalMatern, SphereEmbedded, Zonal

__all__ = ["Periodic", "SphereEmbedded", "Zonal", "ArcCosine", "ChordalMatern", "constant_kernel_diagonal", "Kernel",
           "Stationary", "SquaredExponential", "Matern12", "Matern32", "Matern52", "Additive", "Product",
           "check_inputs"]
