r"""Stationary kernels as immutable pytrees.

Every kernel has ``variance`` :math:`\sigma^2` and ``lengthscale`` :math:`\ell` (a scalar, or one per
input dimension), evaluates its Gram matrix ``k(X1, X2)`` for inputs of shape (N, D), its ``diag(X)``, its
``spectral_density(omega)`` and draws ``sample_frequencies(key, n, input_dim)``.

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
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from .parameters import Module, check_finite, is_concrete
from .grid import Grid

__all__ = ["Periodic", "SphereEmbedded", "Zonal", "ArcCosine", "ChordalMatern", "constant_kernel_diagonal", "Kernel", "Stationary", "SquaredExponential", "Matern12", "Matern32", "Matern52",
           "Additive", "Product", "check_inputs"]


def check_inputs(X, name: str = "X", input_dim: int | None = None):
    """Validate an input array of shape (N, D): rank 2, at least one row, finite, matching ``input_dim``
    if given. Every feature, kernel and approximation checks its inputs here.

    A :class:`~ppl_sparsegp.grid.Grid` passes through unchanged (its axes were checked when built).

    :param X: the inputs (N, D).
    :param name: the argument's name, for the error messages.
    :param input_dim: the number of input dimensions D required, or None for any.
    :returns: X as a JAX array (a Grid unchanged).
    :raises ValueError: for NaN or infinite entries, a rank other than 2, zero rows, or a D other than
        ``input_dim``.
    """
    if isinstance(X, Grid):
        if input_dim is not None and X.shape[1] != input_dim:
            raise ValueError(f"{name} has {X.shape[1]} input dimensions, expected {input_dim}")
        return X
    check_finite(X, name)
    with jax.ensure_compile_time_eval():  # NumPy data stay concrete inside a trace (jnp.asarray would stage it)
        X = jnp.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must have shape (N, D) (rank 2), got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has no rows (shape {X.shape}): give at least one input")
    if input_dim is not None and X.shape[1] != input_dim:
        raise ValueError(f"{name} has {X.shape[1]} input dimensions, expected {input_dim}")
    return X


def as_points(X):
    """An (N, D) array for an array or a :class:`~ppl_sparsegp.grid.Grid`."""
    return X.points() if isinstance(X, Grid) else X


class Kernel(Module):
    """Base class of kernels: ``k(X1, X2)`` Gram matrix, ``diag(X)``."""

    def __call__(self, X1, X2=None):
        raise NotImplementedError

    def diag(self, X):
        raise NotImplementedError

    @property
    def input_dim(self):
        """Number of input dimensions fixed by the kernel, or None if any D is accepted."""
        return None


class Stationary(Kernel):
    r"""A stationary kernel :math:`\sigma^2\,\rho(\tau)` of the scaled distance
    :math:`\tau = \|(\mathbf x - \mathbf x')/\boldsymbol\ell\|`.

    :param variance: :math:`\sigma^2 > 0` (number, array, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, scalar or shape (D,) for one per input dimension.
    """

    _params = ("variance", "lengthscale")
    _positive = ("variance", "lengthscale")

    def __init__(self, variance=1.0, lengthscale=1.0):
        if is_concrete(variance):
            variance = jnp.asarray(variance, dtype=jnp.result_type(float))
            if variance.ndim != 0:
                raise ValueError(f"variance must be a scalar, got shape {variance.shape}")
        if is_concrete(lengthscale):
            lengthscale = jnp.asarray(lengthscale, dtype=jnp.result_type(float))
            if lengthscale.ndim > 1:
                raise ValueError(f"lengthscale must be a scalar or shape (D,), got {lengthscale.shape}")
        self._set(variance=variance, lengthscale=lengthscale)

    # --- profile -----------------------------------------------------------------------------------
    def profile(self, tau):
        """The correlation :math:`\\rho(\\tau)`, with :math:`\\rho(0) = 1`."""
        raise NotImplementedError

    @property
    def input_dim(self):
        ls = jnp.shape(self.lengthscale)
        return ls[0] if len(ls) == 1 else None

    def _inputs(self, X1, X2):
        """The validated point arrays (N1, D) and (N2, D) (X2 None: X1 itself)."""
        A = as_points(check_inputs(X1, "X", self.input_dim))
        B = A if X2 is None else as_points(check_inputs(X2, "X", self.input_dim))
        if A.shape[1] != B.shape[1]:
            raise ValueError(f"X1 and X2 have different input dimensions: {A.shape[1]} vs {B.shape[1]}")
        return A, B

    def scaled_sqdist(self, X1, X2=None):
        """Squared scaled distances :math:`\\tau^2` (N1, N2), clamped at 0."""
        return _scaled_sqdist(self.lengthscale, *self._inputs(X1, X2))

    def _gram_points(self, A, B):
        """k(A, B) for validated point arrays (one compiled program per kernel class and shapes: ``_gram``)."""
        return self.variance * self.profile(_safe_sqrt(_scaled_sqdist(self.lengthscale, A, B)))

    def __call__(self, X1, X2=None):
        return _gram(self, *self._inputs(X1, X2))

    def diag(self, X):
        X = check_inputs(X, "X", self.input_dim)
        return jnp.full(X.shape[:1], self.variance, dtype=jnp.result_type(X.dtype, float))

    def kappa(self, r):
        """:math:`\\kappa(\\mathbf r)` for difference vectors r of shape (..., D)."""
        tau = _safe_sqrt(jnp.sum((jnp.asarray(r) / self.lengthscale) ** 2, axis=-1))
        return self.variance * self.profile(tau)

    # --- spectrum ----------------------------------------------------------------------------------
    def _lengthscales(self, D):
        return jnp.broadcast_to(jnp.asarray(self.lengthscale), (D,))

    def log_unit_density(self, w):
        """log p₁(w): normalised spectral density of the unit-lengthscale kernel, w of shape (..., D)."""
        raise NotImplementedError

    def spectral_density(self, omega):
        r""":math:`s(\boldsymbol\omega) = \sigma^2 (2\pi)^D \prod_d \ell_d\; p_1(\boldsymbol\omega\odot
        \boldsymbol\ell)` for ω of shape (..., D) (a 1-D array is read as D = 1)."""
        omega = jnp.asarray(omega)
        if omega.ndim == 1 and self.input_dim in (None, 1):
            omega = omega[:, None]
        D = omega.shape[-1]
        ls = self._lengthscales(D)
        log_s = (jnp.log(self.variance) + D * math.log(2 * math.pi) + jnp.sum(jnp.log(ls))
                 + self.log_unit_density(omega * ls))
        return jnp.exp(log_s)

    def log_spectral_density_normalised(self, omega):
        """log p(ω) = log s(ω) − log((2π)^D σ²), the density ``sample_frequencies`` draws from."""
        D = omega.shape[-1]
        ls = self._lengthscales(D)
        return jnp.sum(jnp.log(ls)) + self.log_unit_density(omega * ls)

    def sample_unit_frequencies(self, key, n, input_dim):
        """n draws from p₁ (unit lengthscale), shape (n, input_dim)."""
        raise NotImplementedError

    def sample_frequencies(self, key, n, input_dim=None):
        """n frequencies from the normalised spectral density p(ω), shape (n, D)."""
        D = input_dim if input_dim is not None else (self.input_dim or 1)
        return self.sample_unit_frequencies(key, n, D) / self._lengthscales(D)


@jax.jit
def _scaled_sqdist(lengthscale, A, B):
    A, B = A / lengthscale, B / lengthscale
    centre = jnp.mean(A, axis=0)  # centring keeps |a|²+|b|²−2a·b accurate for offset inputs
    A, B = A - centre, B - centre
    d2 = jnp.sum(A**2, 1)[:, None] + jnp.sum(B**2, 1)[None, :] - 2.0 * A @ B.T
    return jnp.maximum(d2, 0.0)


# A Gram matrix is a dozen operations; called outside a trace (the dense references, predictions, the
# adequacy check) each would compile on its own at its shapes, so the arithmetic is one program per
# kernel class and shapes (10x faster eagerly; inside a model's trace it is inlined as before).
_gram = jax.jit(lambda kernel, A, B: kernel._gram_points(A, B))


def _safe_sqrt(x):
    # the clamp zeroes the gradient at r = 0, where the Matérn distance derivative is undefined
    tiny = jnp.finfo(jnp.result_type(x)).tiny
    return jnp.sqrt(jnp.maximum(x, tiny * 1e4))


class SquaredExponential(Stationary):
    r"""Squared exponential: :math:`\rho(\tau) = e^{-\tau^2/2}`; :math:`p_1 = \mathcal N(0, I)`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    def profile(self, tau):
        return jnp.exp(-0.5 * tau**2)

    def _gram_points(self, A, B):  # avoid the sqrt: exact and smooth at r = 0
        return self.variance * jnp.exp(-0.5 * _scaled_sqdist(self.lengthscale, A, B))

    def log_unit_density(self, w):
        D = w.shape[-1]
        return -0.5 * jnp.sum(w**2, -1) - 0.5 * D * math.log(2 * math.pi)

    def sample_unit_frequencies(self, key, n, input_dim):
        return jax.random.normal(key, (n, input_dim))


class _Matern(Stationary):
    r"""Matérn-ν with :math:`p_1` the multivariate Student-t with 2ν degrees of freedom [2, eq. 4.15]."""

    nu: float = None

    def log_unit_density(self, w):
        D = w.shape[-1]
        df = 2.0 * self.nu
        return (gammaln((df + D) / 2) - gammaln(df / 2) - 0.5 * D * math.log(df * math.pi)
                - 0.5 * (df + D) * jnp.log1p(jnp.sum(w**2, -1) / df))

    def sample_unit_frequencies(self, key, n, input_dim):
        kz, kg = jax.random.split(key)
        z = jax.random.normal(kz, (n, input_dim))
        g = 2.0 * jax.random.gamma(kg, self.nu, (n, 1))  # chi-square with 2ν degrees of freedom
        return z / jnp.sqrt(g / (2.0 * self.nu))

    @property
    def lam(self):
        """:math:`\\lambda = \\sqrt{2\\nu}/\\ell` (the VFF paper's parameterisation)."""
        return math.sqrt(2.0 * self.nu) / self.lengthscale


class Matern12(_Matern):
    r"""Matérn-1/2 (exponential): :math:`\rho(\tau) = e^{-\tau}`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    nu = 0.5

    def profile(self, tau):
        return jnp.exp(-tau)


class Matern32(_Matern):
    r"""Matérn-3/2: :math:`\rho(\tau) = (1+\sqrt3\tau)e^{-\sqrt3\tau}`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    nu = 1.5

    def profile(self, tau):
        s = math.sqrt(3.0) * tau
        return (1.0 + s) * jnp.exp(-s)


class Matern52(_Matern):
    r"""Matérn-5/2: :math:`\rho(\tau) = (1+\sqrt5\tau+5\tau^2/3)e^{-\sqrt5\tau}`.

    :param variance: :math:`\sigma^2 > 0`, a scalar (number, Distribution or Param).
    :param lengthscale: :math:`\ell > 0`, a scalar or one per input dimension (D,), in the inputs' units.
    :raises ValueError: for a variance that is not a scalar, a lengthscale of rank > 1, or a non-positive
        or non-finite concrete value.
    """

    nu = 2.5

    def profile(self, tau):
        s = math.sqrt(5.0) * tau
        return (1.0 + s + s**2 / 3.0) * jnp.exp(-s)


class Periodic(Kernel):
    r"""The periodic (exp-sine-squared) kernel on one input dimension (equation 47 of [1]):
    :math:`k(x, x') = \sigma^2\exp\big(-2\sin^2(\pi(x-x')/p)/\ell^2\big)`.

    Its Fourier series :math:`k(\tau) = \sum_{j\ge 0} q_j\cos(2\pi j\tau/p)` has
    :math:`q_0 = \sigma^2 e^{-1/\ell^2}I_0(1/\ell^2)`, :math:`q_j = 2\sigma^2 e^{-1/\ell^2}I_j(1/\ell^2)`
    (modified Bessel functions), computed by :meth:`fourier_coefficients`. With
    :class:`~ppl_sparsegp.features.FourierFeatures` on one period (b − a = p) Kuu is exactly diagonal and
    the approximation is the truncated series (see ``features/fourier.py``).

    :param variance: :math:`\sigma^2 > 0`.
    :param lengthscale: :math:`\ell > 0` (scalar).
    :param period: :math:`p > 0` (scalar).

    References:
        1. MacKay (1998), Introduction to Gaussian processes; Rasmussen & Williams (2006), eq. 4.31.
    """

    _params = ("variance", "lengthscale", "period")
    _positive = ("variance", "lengthscale", "period")

    def __init__(self, variance=1.0, lengthscale=1.0, period=1.0):
        for name, value in (("variance", variance), ("lengthscale", lengthscale), ("period", period)):
            if is_concrete(value) and jnp.ndim(value) != 0:
                raise ValueError(f"{name} must be a scalar, got shape {jnp.shape(value)}")
        self._set(variance=variance, lengthscale=lengthscale, period=period)

    @property
    def input_dim(self):
        return 1

    def profile_of_lag(self, tau):
        """k(τ)/σ² for lags τ."""
        return jnp.exp(-2.0 * jnp.sin(jnp.pi * tau / self.period) ** 2 / self.lengthscale**2)

    def __call__(self, X1, X2=None):
        x1 = check_inputs(as_points(X1), "X1", 1)[:, 0]
        x2 = x1 if X2 is None else check_inputs(as_points(X2), "X2", 1)[:, 0]
        return self.variance * self.profile_of_lag(x1[:, None] - x2[None, :])

    def diag(self, X):
        X = check_inputs(X, "X", 1)
        return jnp.full(X.shape[:1], self.variance, dtype=jnp.result_type(X.dtype, float))

    def fourier_coefficients(self, num: int):
        r""":math:`q_0, \dots, q_{num-1}` in closed form: with :math:`z = 1/\ell^2`,
        :math:`e^{-z}I_j(z) = e^{-z}I_0(z)\,\rho_j`, where the ratios :math:`r_j = I_j/I_{j-1}` come from the
        continued fraction :math:`r_j = 1/(2j/z + r_{j+1})` (Miller's backward recurrence, stable and free of
        overflow; started at :math:`r_{J+1} = 0`), :math:`\rho_j = r_1\cdots r_j`, and the normalisation
        :math:`e^{-z}I_0(z) = 1/(1 + 2\sum_{j\ge1}\rho_j)` follows from :math:`e^{z} = I_0 + 2\sum_j I_j`,
        so the coefficients sum to σ² exactly. Every coefficient is ≥ 0; those below the dtype's range are
        0. J = num + 16 + ⌈z⌉ (to rounding: checked against scipy's ``ive`` for ℓ = 0.05 … 100, num ≤ 100);
        with a traced lengthscale z is unknown and J = num + 116, at rounding for ℓ ≥ 0.08 (2e-9 relative
        at ℓ = 0.05).

        (An FFT of k on one period, used before, gave coefficients < 0 once q_j/q_0 fell below rounding:
        from num = 20 at ℓ ≥ 1.)"""
        if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
            raise ValueError(f"num must be a positive int, got {num!r}")
        z_max = 1.0 / float(self.lengthscale) ** 2 if is_concrete(self.lengthscale) else 100.0
        num = int(num)
        J = num + 16 + int(math.ceil(z_max))
        z = 1.0 / jnp.asarray(self.lengthscale, dtype=jnp.result_type(self.lengthscale, float)) ** 2

        def step(r, j):
            r = 1.0 / (2.0 * j / z + r)
            return r, r

        _, r = jax.lax.scan(step, jnp.zeros((), z.dtype), jnp.arange(J, 0, -1).astype(z.dtype))
        rho = jnp.cumprod(r[::-1])                       # I_j / I_0, j = 1 … J
        q0 = 1.0 / (1.0 + 2.0 * jnp.sum(rho))            # e^{-z} I_0(z)
        return self.variance * jnp.concatenate([q0[None], 2.0 * q0 * rho[: num - 1]])


class _Combination(Kernel):
    """Kernels acting on one input column each: ``kernels[d]`` sees column d."""

    _params = ("kernels",)

    def __init__(self, kernels):
        kernels = tuple(kernels)
        if not kernels or not all(isinstance(k, Kernel) for k in kernels):
            raise ValueError("kernels must be a non-empty sequence of Kernel instances")
        self._set(kernels=kernels)

    @property
    def input_dim(self):
        return len(self.kernels)

    def _columns(self, X):
        X = as_points(check_inputs(X, "X", self.input_dim))
        return [X[:, d:d + 1] for d in range(X.shape[1])]

    def parts(self, X1, X2=None):
        """The per-dimension Gram matrices, shape (D, N1, N2)."""
        c1 = self._columns(X1)
        c2 = c1 if X2 is None else self._columns(X2)
        return jnp.stack([k(a, b) for k, a, b in zip(self.kernels, c1, c2)])

    def parts_diag(self, X):
        return jnp.stack([k.diag(c) for k, c in zip(self.kernels, self._columns(X))])


class Additive(_Combination):
    r"""Additive kernel :math:`k(\mathbf x,\mathbf x') = \sum_d k_d(x_d, x'_d)` [1, §4.1].

    :param kernels: a sequence of D one-dimensional kernels, ``kernels[d]`` acting on input column d.
    :raises ValueError: for an empty sequence or an element that is not a Kernel."""

    def __call__(self, X1, X2=None):
        return jnp.sum(self.parts(X1, X2), 0)

    def diag(self, X):
        return jnp.sum(self.parts_diag(X), 0)


class Product(_Combination):
    r"""Separable kernel :math:`k(\mathbf x,\mathbf x') = \prod_d k_d(x_d, x'_d)` [1, §4.2].

    Its spectral density is the product of the 1-D densities, so frequencies are drawn per dimension.

    :param kernels: a sequence of D one-dimensional kernels, ``kernels[d]`` acting on input column d.
    :raises ValueError: for an empty sequence or an element that is not a Kernel.
    """

    def __call__(self, X1, X2=None):
        return jnp.prod(self.parts(X1, X2), 0)

    def diag(self, X):
        return jnp.prod(self.parts_diag(X), 0)

    @property
    def variance(self):
        return math.prod([k.variance for k in self.kernels])

    def spectral_density(self, omega):
        omega = jnp.asarray(omega)
        return jnp.prod(jnp.stack([k.spectral_density(omega[..., d:d + 1])
                                   for d, k in enumerate(self.kernels)]), 0)

    def sample_frequencies(self, key, n, input_dim=None):
        keys = jax.random.split(key, len(self.kernels))
        return jnp.concatenate([k.sample_frequencies(kk, n, 1) for k, kk in zip(self.kernels, keys)], 1)


def constant_kernel_diagonal(kernel):
    r"""k(x, x) of a kernel whose diagonal does not depend on x (stationary kernels and sums/products of
    them), so that :math:`\sum_n k(\mathbf x_n, \mathbf x_n) = N\,k(\mathbf x,\mathbf x)` needs no data.

    :raises ValueError: for any other kernel.
    """
    if isinstance(kernel, (Stationary, Periodic)) or (isinstance(kernel, Zonal) and kernel.order == 0):
        return jnp.asarray(kernel.variance)
    if isinstance(kernel, Additive):
        return sum(constant_kernel_diagonal(k) for k in kernel.kernels)
    if isinstance(kernel, Product):
        out = 1.0
        for k in kernel.kernels:
            out = out * constant_kernel_diagonal(k)
        return jnp.asarray(out)
    raise ValueError("precomputed statistics need a kernel with a constant diagonal k(x, x) (a stationary "
                     "kernel, a zonal kernel of order 0 such as ChordalMatern or ArcCosine(0), or an "
                     f"Additive/Product of them), got {type(kernel).__name__}")


class SphereEmbedded(Kernel):
    r"""A kernel of (lon, lat) inputs in degrees through the unit sphere:
    :math:`k(\mathbf x,\mathbf x') = k_0(e(\mathbf x), e(\mathbf x'))` with
    :math:`e(\lambda,\varphi) = (\cos\varphi\cos\lambda, \cos\varphi\sin\lambda, \sin\varphi)`, as the
    paper's earth-elevation model (Sun et al. 2021, §6.1). Invariant under :class:`~ppl_sparsegp.groups.LongitudeRotation` when ``base`` is
    isotropic stationary (a rotation about the polar axis preserves Euclidean distances).

    :param base: a kernel on 3-D inputs.
    """

    _params = ("base",)

    def __init__(self, base):
        if not isinstance(base, Kernel):
            raise ValueError(f"base must be a Kernel, got {type(base).__name__}")
        self._set(base=base)

    @property
    def input_dim(self):
        return 2

    @staticmethod
    def embed(X):
        X = check_inputs(X, "X", 2)
        lon, lat = jnp.deg2rad(X[:, 0]), jnp.deg2rad(X[:, 1])
        return jnp.stack([jnp.cos(lat) * jnp.cos(lon), jnp.cos(lat) * jnp.sin(lon), jnp.sin(lat)], axis=1)

    def __call__(self, X1, X2=None):
        return self.base(self.embed(X1), None if X2 is None else self.embed(X2))

    def diag(self, X):
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

    def __init__(self, variance=1.0, lengthscale=1.0, bias=1.0):
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
        ls = jnp.shape(self.lengthscale)
        return ls[0] if len(ls) == 1 else None

    def kappa(self, t):
        """κ(t) on [−1, 1], κ(1) = 1 (not multiplied by σ²)."""
        raise NotImplementedError

    def vanishing_degree(self, n: int, d: int) -> bool:
        """Whether the Funk–Hecke coefficient a_n is exactly 0 on :math:`S^{d-1}` for every value of the
        hyperparameters (those degrees carry no feature). Default: none."""
        return False

    def to_sphere(self, X):
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

    def diag(self, X):
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

    def __init__(self, order: int = 1, variance=1.0, lengthscale=1.0, bias=1.0):
        if isinstance(order, bool) or order not in (0, 1, 2):
            raise ValueError(f"ArcCosine: order must be 0, 1 or 2, got {order!r}")
        object.__setattr__(self, "order", int(order))
        super().__init__(variance, lengthscale, bias)

    def kappa(self, t):
        return (_arccos_kappa0, _arccos_kappa1, _arccos_kappa2)[self.order](t)  # Eq. (6) [1]

    def vanishing_degree(self, n, d):
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

    def __init__(self, nu: float = 1.5, variance=1.0, lengthscale=1.0, bias=1.0, chordal_lengthscale=1.0):
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

    def kappa(self, t):
        tau = _safe_sqrt(2.0 - 2.0 * jnp.clip(t, -1.0, 1.0)) / self.chordal_lengthscale
        return {0.5: Matern12, 1.5: Matern32, 2.5: Matern52}[self.nu].profile(self, tau)
