r"""Random Fourier features (Rahimi & Recht 2007) and their frequency samplers.

By Bochner's theorem a stationary kernel with normalised spectral density :math:`p` (the convention of
:mod:`ppl_sparsegp.kernels`) is :math:`k(\mathbf r) = \sigma^2\,\mathbb E_{p}[\cos\boldsymbol\omega^\top
\mathbf r]`. With R frequencies :math:`\Omega = [\boldsymbol\omega_1, \dots, \boldsymbol\omega_R]^\top`
drawn from the density :math:`p_1` of the *unit-lengthscale* kernel and the lengthscales applied to the
inputs, :math:`\tilde{\mathbf x} = \mathbf x / \boldsymbol\ell`, the feature map [1, eq. 5; 2, §1.1] is

.. math::

    \boldsymbol\phi(\mathbf x) = R^{-1/2}\,[\cos(\Omega\tilde{\mathbf x});\ \sin(\Omega\tilde{\mathbf x})]
    \in\mathbb R^{2R}, \qquad k(\mathbf x, \mathbf x') \approx \sigma^2\,\boldsymbol\phi(\mathbf x)^\top
    \boldsymbol\phi(\mathbf x') = \frac{\sigma^2}{R}\sum_{r=1}^R \cos\boldsymbol\omega_r^\top
    (\tilde{\mathbf x} - \tilde{\mathbf x}'),

(the cos block first, then the sin block; the paper interleaves them, which only permutes features).
The signal variance :math:`\sigma^2` is the kernel's ``variance`` and may be learned (the paper fixes it
at 1). Note :math:`\boldsymbol\phi(\mathbf x)^\top\boldsymbol\phi(\mathbf x) = 1` exactly, so the
approximation is exact on the diagonal.

**As an inducing feature** (weight space): :math:`f(\mathbf x) = \boldsymbol\phi(\mathbf x)^\top\mathbf u`
with :math:`\mathbf u\sim\mathcal N(0, \sigma^2 I_{2R})`, so :math:`K_{uu} = \sigma^2 I` (a
:class:`~ppl_sparsegp.linalg.Diagonal`) and :math:`K_{uf} = \sigma^2\Phi(X)` with :math:`\Phi(X) =
[\boldsymbol\phi(\mathbf x_1), \dots]` of shape (2R, N). Then :math:`K_{fu}K_{uu}^{-1}K_{uf} =
\sigma^2\Phi^\top\Phi` is the sparse-spectrum kernel [3]; the generic conditional and collapsed bound
apply unchanged, and because :math:`\operatorname{diag}(K_{ff} - Q_{ff}) = 0` the collapsed bound *is*
the sparse-spectrum marginal likelihood.

**Frequency samplers** (:func:`sample_frequencies`), all from :math:`p_1` of the kernel family:

* ``"mc"``: i.i.d. Monte Carlo (error of the Gram matrix :math:`O(R^{-1/2})`);
* ``"qmc"``: scrambled Halton points [4] mapped through the inverse CDF (Gaussian for the squared
  exponential; Gaussian over the square root of an inverse χ² for the Matérn's Student-t);
* ``"orf"``: orthogonal random features [5]: blocks of D orthonormal directions (Haar, from the QR
  decomposition of a Gaussian matrix), with radii distributed as the norms of draws from :math:`p_1`
  (both families are isotropic in the unit-lengthscale space).

References:
    1. Rahimi, Recht (2007), Random features for large-scale kernel machines.
    2. Warren, Oliveira, Ramos (2024), Stein random feature regression, UAI (eqs. 1, 5, 6), and the
       implementer's notes ``shared/notes/srf.md`` §1.1.
    3. Lázaro-Gredilla, Quiñonero-Candela, Rasmussen, Figueiras-Vidal (2010), Sparse spectrum Gaussian
       process regression, JMLR 11.
    4. Halton (1960); Owen (2017), A randomized Halton algorithm in R (random digit permutations).
    5. Yu, Suresh, Choromanski, Holtmann-Rice, Kumar (2016), Orthogonal random features, NeurIPS.
"""
from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammainc, gammaln, ndtri
from jax.typing import ArrayLike
from numpyro.distributions import Distribution, constraints

from ..covariances import Kuf, Kuu
from ..kernels import Kernel, SquaredExponential, Stationary, check_inputs
from ..kernels.stationary import _Matern
from ..linalg import Diagonal
from ..parameters import Param, check_finite, is_concrete
from ..validation import (
    AKernel,
    AnyOf,
    ArrayOf,
    Boolean,
    Count,
    Inputs,
    InstanceOf,
    OneOf,
    OrNone,
    RngKey,
    Template,
    validated,
)
from .base import FloatDtype, InducingFeature

__all__ = ["RandomFourierFeatures", "ImportanceFourierFeatures", "SpectralDensity", "sample_frequencies",
           "scrambled_halton", "chi2_ppf"]

_METHODS = ("mc", "qmc", "orf")
Method = Annotated[str, OneOf(*_METHODS)]
#: frequencies: an array, a Param or a prior (the constructor checks the shape (R, D))
AnyField = Annotated[Any, Template(rank=None, positive=False)]
PositiveScale = Annotated[Any, ArrayOf(rank=(0, 1), positive=True)]
MaybeInputs = Annotated[Any, OrNone(Inputs.__metadata__[0])]
KernelOrClass = Annotated[Any, AnyOf(AKernel.__metadata__[0], InstanceOf(type, what="a kernel class"))]


def _frequency_shape(frequencies):
    if isinstance(frequencies, Param):
        return tuple(frequencies.init.shape)
    if isinstance(frequencies, Distribution):
        return tuple(frequencies.batch_shape + frequencies.event_shape)
    return tuple(jnp.shape(frequencies))


class RandomFourierFeatures(InducingFeature):
    r"""Random Fourier features :math:`\boldsymbol\phi(\mathbf x) = R^{-1/2}[\cos\Omega\tilde{\mathbf x};
    \sin\Omega\tilde{\mathbf x}]` with :math:`\tilde{\mathbf x} = \mathbf x/\boldsymbol\ell` (module docstring).

    :param frequencies: Ω of shape (R, D), frequencies of the *unit-lengthscale* kernel: an array
        (fixed: random Fourier feature regression), a :class:`~ppl_sparsegp.Param` (learned by maximum
        likelihood under SVI), or a NumPyro distribution with event shape (R, D) (a latent site
        ``feature_frequencies``: MAP under SVI, particles under SteinVI; :class:`SpectralDensity` is the
        kernel's own spectral density).
    """

    _params = ("frequencies",)
    moves_with_lengthscale = True  # Ω/ℓ: the functions move with ℓ
    covariance_of_prior = False  # weight space: σ²ΦᵀΦ estimates k, so Kff − Qff is indefinite

    @validated
    def __init__(self, frequencies: AnyField):
        if is_concrete(frequencies):
            frequencies = jnp.asarray(frequencies, dtype=jnp.result_type(float))
            check_finite(frequencies, "frequencies")
        elif isinstance(frequencies, Param):
            check_finite(frequencies.init, "frequencies")
        shape = _frequency_shape(frequencies)
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise ValueError(f"frequencies must have shape (R, D) with R, D >= 1, got shape {shape}")
        self._set(frequencies=frequencies)

    @classmethod
    @validated
    def from_kernel(cls, kernel: AKernel, rng_key: RngKey, num_frequencies: Count, input_dim: Count,
                    method: Method = "mc"):
        """Frequencies drawn from the kernel's spectral density with :func:`sample_frequencies`."""
        return cls(sample_frequencies(kernel, rng_key, num_frequencies, input_dim, method))

    @property
    def num_frequencies(self) -> int:
        """R (the number of features is 2R)."""
        return _frequency_shape(self.frequencies)[0]

    @property
    def input_dim(self) -> int:
        return _frequency_shape(self.frequencies)[1]

    @property
    def num_features(self) -> int:
        return 2 * self.num_frequencies

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        """Inputs (N, D) with D the frequencies' input dimension."""
        return check_inputs(X, name, self.input_dim)

    def check_kernel(self, kernel: Kernel):
        """Refuse a kernel whose lengthscale (value or prior) is neither a scalar nor one per input
        dimension of the frequencies.

        :raises ValueError: naming both shapes and the fix."""
        self._check_lengthscale_shape(_frequency_shape(getattr(kernel, "lengthscale", 1.0)))

    def _check_lengthscale_shape(self, shape):
        D = self.input_dim
        if tuple(shape) not in ((), (1,), (D,)):
            raise ValueError(f"RandomFourierFeatures: the kernel's lengthscale has shape {tuple(shape)} but the "
                             f"frequencies have D = {D} input dimension(s) (shape (R, {D})): give a scalar "
                             f"lengthscale or one of shape ({D},), or frequencies with one column per "
                             f"lengthscale entry")

    @validated
    def features(self, X: Inputs, lengthscale: PositiveScale = 1.0):
        r""":math:`\Phi(X)` of shape (2R, N), unit amplitude: :math:`\Phi^\top\Phi\approx k/\sigma^2`.

        :param X: inputs (N, D).
        :param lengthscale: ℓ, a scalar or (D,): the features of the kernel at this lengthscale.
        :raises ValueError: for bad inputs or a lengthscale of another shape."""
        self._check_lengthscale_shape(jnp.shape(lengthscale))
        X = self.check_inputs(X)
        proj = self.frequencies @ (X / lengthscale).T  # (R, N): ω_rᵀ x̃_n
        scale = 1.0 / math.sqrt(self.num_frequencies)
        return scale * jnp.concatenate([jnp.cos(proj), jnp.sin(proj)], axis=0)  # Eq. (5) [2]

    @validated
    def gram(self, kernel: AKernel, X1: Inputs, X2: MaybeInputs = None):
        r"""The approximate Gram matrix :math:`\sigma^2\Phi(X_1)^\top\Phi(X_2)`."""
        P1 = self.features(X1, kernel.lengthscale)
        P2 = P1 if X2 is None else self.features(X2, kernel.lengthscale)
        return kernel.variance * P1.T @ P2


@Kuu.register(RandomFourierFeatures, Stationary)
def _kuu_rff(feature, kernel):
    dtype = jnp.result_type(feature.frequencies, kernel.variance, float)
    return Diagonal(jnp.full((feature.num_features,), kernel.variance, dtype=dtype))


@Kuf.register(RandomFourierFeatures, Stationary)
def _kuf_rff(feature, kernel, X):
    return kernel.variance * feature.features(X, kernel.lengthscale)


class ImportanceFourierFeatures(InducingFeature):
    r"""Random Fourier features whose frequencies stay put when the lengthscale moves: for NUTS over ℓ.

    With :class:`RandomFourierFeatures` a sampled lengthscale rescales every frequency, so each weight
    :math:`u_r` multiplies a different function at every ℓ: weights and lengthscale are tangled and NUTS
    does not mix (measured: R-hat 1.85, bulk ESS 3 for ℓ). Here the R frequencies are drawn once, in
    absolute units, from a proposal density q (the spectral density of ``proposal``, a kernel at the
    shortest lengthscale of interest), and ℓ enters only through importance weights on the amplitudes,
    as in HSGP's basis expansion [2]:

    .. math::

        \boldsymbol\phi_\ell(\mathbf x) = R^{-1/2}\,[\sqrt{w_r}\cos\boldsymbol\omega_r^\top\mathbf x;
        \sqrt{w_r}\sin\boldsymbol\omega_r^\top\mathbf x]_r,\qquad w_r = p_\ell(\boldsymbol\omega_r) /
        q(\boldsymbol\omega_r),

    so :math:`\sigma^2\boldsymbol\phi_\ell(\mathbf x)^\top\boldsymbol\phi_\ell(\mathbf x') =
    \frac{\sigma^2}{R}\sum_r w_r\cos\boldsymbol\omega_r^\top(\mathbf x - \mathbf x')` is an unbiased
    importance-sampling estimate of :math:`k_\ell(\mathbf x - \mathbf x')` for every ℓ [1, eq. 5; 3].
    Weight space as for :class:`RandomFourierFeatures`: :math:`K_{uu} = \sigma^2 I`,
    :math:`K_{uf} = \sigma^2\Phi_\ell(X)`. The estimate's variance grows with :math:`\mathbb E_q[w^2]`:
    keep the proposal's lengthscale at or below the shortest ℓ the posterior may visit (q wider than
    :math:`p_\ell`, bounded weights :math:`w \le (\ell/\ell_q)^D` for the squared exponential).

    :param frequencies: Ω of shape (R, D) in absolute units (drawn from q: :meth:`from_proposal`).
    :param proposal: the kernel whose normalised spectral density is q (same family as the model's
        kernel; its lengthscale sets q, its variance is unused).

    References:
        1. Rahimi, Recht (2007), Random features for large-scale kernel machines.
        2. Solin, Särkkä (2020), Hilbert space methods for reduced-rank Gaussian process regression.
        3. Owen (2013), Monte Carlo theory, methods and examples, ch. 9 (importance sampling).
    """

    _params = ("frequencies", "proposal")
    covariance_of_prior = False  # weight space, as RandomFourierFeatures

    @validated
    def __init__(self, frequencies: Annotated[Any, ArrayOf()], proposal: AKernel):
        frequencies = jnp.asarray(frequencies, dtype=jnp.result_type(float))
        check_finite(frequencies, "frequencies")
        if frequencies.ndim != 2 or min(frequencies.shape) < 1:
            raise ValueError(f"frequencies must have shape (R, D) with R, D >= 1, got shape {frequencies.shape}")
        if not isinstance(proposal, Stationary) or not is_concrete(proposal):
            raise ValueError(f"proposal must be a concrete stationary kernel (its spectral density is the "
                             f"proposal q), got {proposal!r}")
        self._set(frequencies=frequencies, proposal=proposal)

    @classmethod
    @validated
    def from_proposal(cls, proposal: AKernel, rng_key: RngKey, num_frequencies: Count, input_dim: Count,
                      method: Method = "qmc"):
        """R frequencies drawn from the proposal kernel's spectral density (:func:`sample_frequencies`,
        scaled to absolute units by the proposal's lengthscale)."""
        unit = sample_frequencies(proposal, rng_key, num_frequencies, input_dim, method)
        return cls(unit / proposal._lengthscales(input_dim), proposal)

    @property
    def num_frequencies(self) -> int:
        return self.frequencies.shape[0]

    @property
    def input_dim(self) -> int:
        return self.frequencies.shape[1]

    @property
    def num_features(self) -> int:
        return 2 * self.num_frequencies

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        return check_inputs(X, name, self.input_dim)

    def check_kernel(self, kernel: Kernel):
        if not isinstance(kernel, type(self.proposal)):
            raise NotImplementedError(f"ImportanceFourierFeatures with a {type(self.proposal).__name__} proposal "
                                      f"need a {type(self.proposal).__name__} kernel, got {type(kernel).__name__}")

    @validated
    def weights(self, kernel: AKernel):
        r""":math:`w_r = p_\ell(\boldsymbol\omega_r)/q(\boldsymbol\omega_r)` at the kernel's lengthscale."""
        self.check_kernel(kernel)
        return jnp.exp(kernel.log_spectral_density_normalised(self.frequencies)
                       - self.proposal.log_spectral_density_normalised(self.frequencies))

    @validated
    def features(self, X: Inputs, kernel: AKernel):
        r""":math:`\Phi_\ell(X)` of shape (2R, N), unit amplitude."""
        X = self.check_inputs(X)
        proj = self.frequencies @ X.T  # (R, N): ω_rᵀ x, absolute frequencies
        amp = jnp.sqrt(self.weights(kernel) / self.num_frequencies)[:, None]
        return jnp.concatenate([amp * jnp.cos(proj), amp * jnp.sin(proj)], axis=0)


Kuu.register(ImportanceFourierFeatures, Stationary)(_kuu_rff)  # weight space: σ² I, as for RFF


@Kuf.register(ImportanceFourierFeatures, Stationary)
def _kuf_importance(feature, kernel, X):
    return kernel.variance * feature.features(X, kernel)


# --------------------------------------------------------------------------------------------------
# the kernel's spectral density as a prior over Ω
# --------------------------------------------------------------------------------------------------
def _unit_kernel(kernel):
    if isinstance(kernel, type):
        kernel = kernel()
    if not isinstance(kernel, Stationary):
        raise ValueError(f"kernel must be a stationary kernel (SquaredExponential, Matern*), got "
                         f"{type(kernel).__name__}")
    return type(kernel)()  # σ² = 1, ℓ = 1: p₁ depends on the family only


class SpectralDensity(Distribution):
    r"""The prior :math:`p(\Omega) = \prod_{r=1}^R p_1(\boldsymbol\omega_r)`: i.i.d. rows from the
    normalised spectral density of the unit-lengthscale kernel (standard normal for the squared
    exponential, a multivariate Student-t with 2ν degrees of freedom for Matérn-ν).

    ``log_prob`` uses ``kernel.log_spectral_density_normalised``, ``sample`` the kernel's own sampler.

    :param kernel: a stationary kernel (instance or class); only its family matters.
    :param num_frequencies: R.
    :param input_dim: D.
    """

    arg_constraints = {}
    support = constraints.independent(constraints.real, 2)

    @validated
    def __init__(self, kernel: KernelOrClass, num_frequencies: Count, input_dim: Count, *,
                 validate_args: Annotated[Any, OrNone(Boolean())] = None):
        for name, v in (("num_frequencies", num_frequencies), ("input_dim", input_dim)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.kernel = _unit_kernel(kernel)
        self.num_frequencies, self.input_dim = int(num_frequencies), int(input_dim)
        super().__init__(batch_shape=(), event_shape=(self.num_frequencies, self.input_dim),
                         validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        n = int(np.prod(sample_shape, dtype=int)) * self.num_frequencies
        w = self.kernel.sample_unit_frequencies(key, n, self.input_dim)
        return w.reshape(tuple(sample_shape) + self.event_shape)

    def log_prob(self, value: ArrayLike) -> jax.Array:
        return jnp.sum(self.kernel.log_spectral_density_normalised(value), axis=-1)

    @property
    def mean(self):
        if isinstance(self.kernel, _Matern) and self.kernel.nu <= 0.5:
            raise NotImplementedError("the Matérn-1/2 spectral density (Cauchy) has no mean")
        return jnp.zeros(self.event_shape)

    def tree_flatten(self):
        return (), (type(self.kernel), self.num_frequencies, self.input_dim)

    @classmethod
    def tree_unflatten(cls, aux_data: Any, params: Sequence[Any]):
        return cls(*aux_data)


# --------------------------------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------------------------------
def _primes(n: int) -> list:
    out, c = [], 2
    while len(out) < n:
        if all(c % p for p in out if p * p <= c):
            out.append(c)
        c += 1
    return out


@validated
def scrambled_halton(rng_key: RngKey, num_points: Count, dim: Count, *, dtype: FloatDtype = None):
    r"""Randomised Halton points in :math:`(0, 1)^{dim}`, shape (num_points, dim).

    Coordinate j is the radical inverse of the index :math:`i = 0, 1, \dots` in the j-th prime base
    :math:`b_j` with an independent random permutation of the digits at every digit position [4]:
    :math:`u_{ij} = \sum_k \pi_{jk}(a_k(i))\,b_j^{-k-1}`. Each point is marginally uniform (on the
    :math:`b^{-K}` grid, K chosen for a resolution below 2⁻⁴⁰), and the stratification of the Halton
    sequence is kept: for :math:`n = b_j^m` points every interval :math:`[c/n, (c+1)/n)` of coordinate j
    holds exactly one point. Traceable in ``rng_key`` (static shapes).

    :param rng_key: a JAX PRNG key (the digit permutations).
    :param num_points: the number of points; ``dim``: their dimension (at most the primes tabulated).
    :param dtype: the float dtype of the result (default: JAX's default float).
    :returns: an array (num_points, dim) in (0, 1).
    """
    if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)) or num_points < 1:
        raise ValueError(f"num_points must be a positive int, got {num_points!r}")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim must be a positive int, got {dim!r}")
    return _halton(rng_key, int(num_points), int(dim), jnp.result_type(float) if dtype is None else dtype)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _halton(rng_key, num_points, dim, dtype):
    idx = np.arange(num_points, dtype=np.int64)
    cols = []
    for j, (b, kj) in enumerate(zip(_primes(dim), jax.random.split(rng_key, dim))):
        n_digits = max(1, math.ceil(math.log(num_points) / math.log(b) + 1e-12)) + math.ceil(40 / math.log2(b))
        digits = (idx[:, None] // b ** np.arange(n_digits, dtype=np.int64)[None, :]) % b  # (n, K), static
        perms = jax.vmap(lambda k: jax.random.permutation(k, b))(jax.random.split(kj, n_digits))  # (K, b)
        scrambled = perms[np.arange(n_digits)[None, :], digits]  # π_k(a_k(i))
        weights = jnp.asarray(float(b) ** -(np.arange(n_digits) + 1.0), dtype=dtype)
        cols.append(scrambled.astype(dtype) @ weights)
    u = jnp.stack(cols, axis=1)
    eps = jnp.finfo(dtype).eps
    return jnp.clip(u, eps, 1.0 - eps)


@functools.partial(jax.jit, static_argnames=("num_iterations",))
def chi2_ppf(u: ArrayLike, df: ArrayLike, *, num_iterations: int = 30) -> jax.Array:
    r"""Quantile function of the χ² distribution with ``df`` degrees of freedom, elementwise.

    Wilson–Hilferty start, then Newton steps on :math:`\log x` for :math:`P(df/2, x/2) = u` (JAX has the
    regularised incomplete gamma P but not its inverse).
    """
    u = jnp.asarray(u)
    k = 0.5 * df
    z = ndtri(u)
    c = 2.0 / (9.0 * df)
    x = jnp.maximum(df * (1.0 - c + z * jnp.sqrt(c)) ** 3, 1e-3 * df)

    def newton(_, x):
        F = gammainc(k, 0.5 * x)
        log_pdf = (k - 1.0) * jnp.log(x) - 0.5 * x - k * math.log(2.0) - gammaln(k)
        step = (F - u) / jnp.exp(log_pdf + jnp.log(x))  # d/d(log x) of F = x p(x)
        return x * jnp.exp(-jnp.clip(step, -2.0, 2.0))

    return jax.lax.fori_loop(0, num_iterations, newton, x)


def _inverse_cdf(kernel, u, input_dim):
    """Map uniforms (n, D [+1]) to draws from p₁ of the kernel family."""
    if isinstance(kernel, SquaredExponential):
        return ndtri(u[:, :input_dim])
    if isinstance(kernel, _Matern):
        df = 2.0 * kernel.nu
        g = chi2_ppf(u[:, input_dim], df)
        return ndtri(u[:, :input_dim]) / jnp.sqrt(g / df)[:, None]  # z / sqrt(χ²_df / df) ~ t_df
    raise ValueError(f"quasi-Monte Carlo frequencies are not available for {type(kernel).__name__}")


def sample_frequencies(kernel: Kernel, rng_key: jax.Array, num_frequencies: int, input_dim: int,
                       method: str = "mc") -> jax.Array:
    r"""R frequencies of the unit-lengthscale kernel, shape (R, D), by ``method`` (module docstring).

    :param kernel: a stationary kernel (its family chooses :math:`p_1`).
    :param rng_key: a JAX PRNG key.
    :param num_frequencies: R.
    :param input_dim: D.
    :param method: ``"mc"``, ``"qmc"`` (scrambled Halton) or ``"orf"`` (orthogonal random features).
    :returns: Ω, an array (R, D).
    :raises ValueError: for an unknown ``method``, a non-positive R or D, or a kernel the method does
        not support (quasi-Monte Carlo for some families).
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    for name, v in (("num_frequencies", num_frequencies), ("input_dim", input_dim)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    return _sample(_unit_kernel(kernel), rng_key, int(num_frequencies), int(input_dim), method)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _sample(unit, rng_key, R, D, method):  # jitted: eager dispatch of the Halton digits is slow
    if method == "mc":
        return unit.sample_unit_frequencies(rng_key, R, D)
    if method == "qmc":
        extra = 0 if isinstance(unit, SquaredExponential) else 1
        return _inverse_cdf(unit, scrambled_halton(rng_key, R, D + extra), D)
    # orthogonal random features: Haar-orthogonal blocks of D directions, radii from p₁
    k_dir, k_rad = jax.random.split(rng_key)
    blocks = -(-R // D)
    G = jax.random.normal(k_dir, (blocks, D, D))
    Q, Rq = jnp.linalg.qr(G)
    Q = Q * jnp.sign(jnp.diagonal(Rq, axis1=-2, axis2=-1))[:, None, :]  # Haar measure
    directions = jnp.swapaxes(Q, -1, -2).reshape(blocks * D, D)[:R]  # rows of each block orthonormal
    radii = jnp.linalg.norm(unit.sample_unit_frequencies(k_rad, R, D), axis=1)
    return directions * radii[:, None]
