r"""Observation models: NumPyro distributions plus the variational expectation.

A :class:`Likelihood` maps the latent GP value :math:`f` to a NumPyro distribution :math:`p(y\mid f)`
and provides the three Gaussian integrals every approximation needs, for :math:`q(f) = \mathcal N(m, v)`
taken pointwise:

* the variational expectation :math:`\mathbb E_{q(f)}[\log p(y\mid f)]` (the ELBO's data term);
* the predictive mean and variance of :math:`y` under :math:`\int p(y\mid f)\,q(f)\,df`;
* the predictive log density :math:`\log \int p(y\mid f)\,q(f)\,df` (for the NLPD).

Closed forms are used where they exist (Gaussian; Poisson with log link and exposure; the probit
predictive); otherwise the library's single Gauss–Hermite rule (``gauss_hermite``, in the private
``_quadrature``) is used.

Parameter fields (``variance``, ``df``, ``scale``, ``exposure``) follow :mod:`ppl_sparsegp.parameters`:
a number or array is fixed, a NumPyro distribution is a prior (a sample site after
:func:`~ppl_sparsegp.parameters.instantiate`), a :class:`~ppl_sparsegp.parameters.Param` is optimised.

**Multiclass** (``num_latent = C``: f has a last axis of C latent values, labels in 0..C−1):

* :class:`Softmax`: :math:`p(y\mid\mathbf f) = e^{f_y}/\sum_c e^{f_c}`. Under
  :math:`q(\mathbf f) = \prod_c\mathcal N(m_c, v_c)`,
  :math:`\mathbb E_q\log p(y\mid\mathbf f) = m_y - \mathbb E_q\operatorname{logsumexp}(\mathbf f)`;
  the second term has no closed form and is estimated by Monte Carlo (unbiased for a fresh key).
* :class:`RobustMax` [4, 5]: :math:`p(y\mid\mathbf f) = 1-\epsilon` if :math:`y = \arg\max_c f_c`, else
  :math:`\epsilon/(C-1)`. With :math:`P_y = q(\arg\max\mathbf f = y) = \int\mathcal N(x\mid m_y, v_y)
  \prod_{c\ne y}\Phi\big((x-m_c)/\sqrt{v_c}\big)\,dx` (one-dimensional: the library's Gauss–Hermite rule),
  :math:`\mathbb E_q\log p(y\mid\mathbf f) = P_y\log(1-\epsilon) + (1-P_y)\log\frac{\epsilon}{C-1}`
  exactly, and :math:`p(y) = P_y(1-\epsilon) + (1-P_y)\epsilon/(C-1)`. The HKD paper's CIFAR
  experiments use it [6, §6.4].

**References**

1. Hensman, Matthews, Ghahramani (2015). Scalable variational Gaussian process classification. AISTATS.
2. Hensman, Durrande, Solin (2018). Variational Fourier features for Gaussian processes. JMLR.
3. Rasmussen, Williams (2006). Gaussian Processes for Machine Learning, §3.9 (probit predictive).
4. Hernández-Lobato, Hernández-Lobato, Dupont (2011), Robust multi-class Gaussian process
   classification, NeurIPS.
5. Hensman, Matthews, Ghahramani (2015), Scalable variational Gaussian process classification (robust max).
6. Sun, Shi, Wilson, Grosse (2021), Scalable variational Gaussian processes via harmonic kernel
   decomposition, ICML.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln, log_ndtr, logsumexp, ndtr
from jax.typing import ArrayLike
from numpyro.distributions import Distribution

from ._quadrature import _float_dtype, _hermgauss, gauss_hermite, log_gauss_hermite
from .parameters import Module, Param, check_value, is_concrete
from .validation import Count, Integer, OneOf, PositiveScalar, Real, Template, validated

__all__ = [
    "MulticlassLikelihood",
    "Softmax",
    "RobustMax",
    "Likelihood",
    "Gaussian",
    "Bernoulli",
    "Poisson",
    "StudentT",
]

_LOG_2PI = float(np.log(2.0 * np.pi))


# ---------------------------------------------------------------------------------------------------
# Observations against Gauss–Hermite nodes (the rule itself: _quadrature)
# ---------------------------------------------------------------------------------------------------
def _as_float(y, dtype):
    """Integer/bool observations as ``dtype`` (so int counts do not promote float32 to float64)."""
    y = jnp.asarray(y)
    return y if jnp.issubdtype(y.dtype, jnp.floating) else y.astype(dtype)


def _broadcast_yf(y, mean, var):
    """Broadcast ``mean`` and ``var`` to the joint shape with ``y`` (so GH nodes align with ``y``)."""
    y, mean, var = jnp.asarray(y), jnp.asarray(mean), jnp.asarray(var)
    shape = jnp.broadcast_shapes(y.shape, mean.shape, var.shape)
    return y, jnp.broadcast_to(mean, shape), jnp.broadcast_to(var, shape)



# ---------------------------------------------------------------------------------------------------
# Base class
# ---------------------------------------------------------------------------------------------------
class Likelihood(Module):
    r"""Base observation model :math:`p(y\mid f)` with Gauss–Hermite defaults.

    Subclasses implement :meth:`dist` and override the integrals that have closed forms.
    ``num_points`` (static) is the Gauss–Hermite order used by the defaults.
    """

    _static = ("num_points",)
    #: number of latent functions f the likelihood reads per observation (the last axis of f when > 1)
    num_latent = 1
    #: whether :meth:`variational_expectation` is a Monte Carlo estimate that wants a fresh ``key``
    monte_carlo = False

    @validated
    def __init__(self, *, num_points: Count = 20):
        _hermgauss(num_points)  # validates num_points
        self._set(num_points=int(num_points))

    # -- parameters --------------------------------------------------------------------------------
    def _param(self, name, dtype):
        value = getattr(self, name)
        if isinstance(value, (Distribution, Param)):
            raise TypeError(
                f"{type(self).__name__}.{name} holds a template ({type(value).__name__}); call "
                "ppl_sparsegp.parameters.instantiate(likelihood) inside the model before using it")
        return jnp.asarray(value, dtype)

    # -- the model ---------------------------------------------------------------------------------
    def dist(self, f: ArrayLike) -> Distribution:
        """The NumPyro distribution of ``y`` given latent ``f`` (batch shape ``f.shape``).

        :param f: the latent values, (N,), or (N, L) for ``num_latent`` L > 1.
        """
        raise NotImplementedError

    def log_prob(self, y: ArrayLike, f: ArrayLike) -> jax.Array:
        r""":math:`\log p(y\mid f)`, elementwise.

        :param y: the observations, (N,).
        :param f: the latent values, (N,), or (N, L) for ``num_latent`` L > 1.
        """
        return self.dist(f).log_prob(y)

    # -- Gaussian integrals ------------------------------------------------------------------------
    def variational_expectation(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike,
                                rng_key: Optional[jax.Array] = None) -> jax.Array:
        r"""Per-point :math:`\mathbb E_{\mathcal N(f\mid m, v)}[\log p(y\mid f)]` (Gauss–Hermite here;
        ``rng_key`` is used only by Monte Carlo likelihoods, see ``monte_carlo``).

        :param y: the observations, (N,).
        :param mean: the marginal means of q(f), (N,), or (N, L) for ``num_latent`` L > 1.
        :param var: the marginal variances of q(f), of ``mean``'s shape.
        :param rng_key: a JAX PRNG key (Monte Carlo likelihoods only).
        :returns: array of the broadcast shape of ``y``, ``mean``, ``var``.
        """
        y, mean, var = _broadcast_yf(y, mean, var)
        return gauss_hermite(lambda f: self.log_prob(y, f), mean, var, self.num_points)

    def predict_mean_and_var(self, mean: ArrayLike, var: ArrayLike) -> tuple[jax.Array, jax.Array]:
        r"""Mean and variance of :math:`y` under :math:`\int p(y\mid f)\,\mathcal N(f\mid m, v)\,df`.

        Law of total variance, by Gauss–Hermite:
        :math:`\mathbb E[y] = \mathbb E[\mu(f)]`,
        :math:`\mathrm{Var}[y] = \mathbb E[\sigma^2(f)] + \mathbb E[(\mu(f) - \mathbb E[y])^2]`.

        :param mean: the marginal means of q(f), (N,), or (N, L) for ``num_latent`` L > 1.
        :param var: the marginal variances of q(f), of ``mean``'s shape.
        :returns: ``(mean, var)`` of y, arrays (N,) (multiclass: (N, C), the one-hot label's).
        """
        def mu(f):
            return self.dist(f).mean

        ey = gauss_hermite(mu, mean, var, self.num_points)
        e_var = gauss_hermite(lambda f: self.dist(f).variance, mean, var, self.num_points)
        var_mu = gauss_hermite(lambda f: (mu(f) - ey) ** 2, mean, var, self.num_points)
        return ey, e_var + var_mu

    def predict_log_density(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike) -> jax.Array:
        r"""Per-point :math:`\log \int p(y\mid f)\,\mathcal N(f\mid m, v)\,df` (for the NLPD).

        Default: the Gauss–Hermite rule in log space (``log_gauss_hermite``) of :meth:`log_prob`.

        :param y: the observations, (N,).
        :param mean: the marginal means of q(f), (N,), or (N, L) for ``num_latent`` L > 1.
        :param var: the marginal variances of q(f), of ``mean``'s shape.
        :returns: array (N,).
        """
        y, mean, var = _broadcast_yf(y, mean, var)
        return log_gauss_hermite(lambda f: self.log_prob(y, f), mean, var, self.num_points)

    # -- data --------------------------------------------------------------------------------------
    def validate(self, y: ArrayLike, name: str = "y") -> jax.Array:
        """Check observations; raise ``ValueError`` naming ``name``. For traced ``y`` the same checks
        run when the program runs, in debug mode (:func:`~ppl_sparsegp.parameters.debug_checks`).

        :param y: the observations, (N,).
        :param name: the argument's name, for the message.
        :returns: ``jnp.asarray(y)``.
        """
        if is_concrete(y):
            try:
                np.asarray(y, dtype=float)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{name} must be numeric, got {type(y).__name__}") from e

        def problem(arr):
            arr = np.asarray(arr, dtype=float)
            if not np.all(np.isfinite(arr)):
                return f"{name} contains NaN or inf"
            try:
                self._validate_values(arr, name)
            except ValueError as e:
                return str(e)
            return None

        check_value(y, problem)
        return jnp.asarray(y)

    def _validate_values(self, arr, name):
        """Likelihood-specific checks on a finite float64 numpy copy of ``y``."""

    def subsample(self, idx: ArrayLike):
        """This likelihood restricted to the observations ``idx`` (for minibatching).

        :param idx: the integer indices of the observations kept, (B,).
        """
        return self


# ---------------------------------------------------------------------------------------------------
# Concrete likelihoods
# ---------------------------------------------------------------------------------------------------
class Gaussian(Likelihood):
    r"""Gaussian noise :math:`y \mid f \sim \mathcal N(f, \sigma^2)`.

    Closed forms:

    .. math::
        \mathbb E_q[\log p(y\mid f)] &= -\tfrac12\log(2\pi\sigma^2) - \frac{(y-m)^2 + v}{2\sigma^2},\\
        \int p(y\mid f)\,\mathcal N(f\mid m, v)\,df &= \mathcal N(y\mid m, v + \sigma^2).

    :param variance: :math:`\sigma^2 > 0` (number, array, prior or Param).
    :param num_points: nodes of the Gauss–Hermite rule where no closed form exists (static, default 20).
    """

    _params = ("variance",)
    _positive = ("variance",)

    @validated
    def __init__(self, variance: PositiveScalar = 1.0, *, num_points: Count = 20):
        super().__init__(num_points=num_points)
        self._set(variance=variance)

    def dist(self, f: ArrayLike):
        f = jnp.asarray(f)
        s2 = self._param("variance", _float_dtype(f))
        return dist.Normal(f, jnp.sqrt(s2))

    def variational_expectation(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike,
                                rng_key: Optional[jax.Array] = None) -> jax.Array:
        dtype = _float_dtype(mean, var)
        s2 = self._param("variance", dtype)
        y = _as_float(y, dtype)
        # -½ log(2πσ²) − ((y − m)² + v) / (2σ²)
        return -0.5 * (_LOG_2PI + jnp.log(s2)) - ((y - mean) ** 2 + var) / (2.0 * s2)

    def predict_mean_and_var(self, mean: ArrayLike, var: ArrayLike) -> tuple[jax.Array, jax.Array]:
        s2 = self._param("variance", _float_dtype(mean, var))
        mean, var = jnp.broadcast_arrays(jnp.asarray(mean), jnp.asarray(var))
        return mean + jnp.zeros_like(s2), var + s2  # y ~ N(m, v + σ²)

    def predict_log_density(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike) -> jax.Array:
        dtype = _float_dtype(mean, var)
        s2 = self._param("variance", dtype)
        y = _as_float(y, dtype)
        tot = var + s2
        # log N(y | m, v + σ²)
        return -0.5 * (_LOG_2PI + jnp.log(tot) + (y - mean) ** 2 / tot)


class Bernoulli(Likelihood):
    r"""Binary classification :math:`p(y=1\mid f) = \sigma(f)` (logit) or :math:`\Phi(f)` (probit).

    The variational expectation is by Gauss–Hermite. For the probit link the predictive is closed form:

    .. math:: p(y=1) = \int \Phi(f)\,\mathcal N(f\mid m, v)\,df = \Phi\!\big(m/\sqrt{1+v}\big)

    (Rasmussen & Williams Eq. 3.82 [3]); for the logit link it is by Gauss–Hermite.

    :param link: ``"logit"`` or ``"probit"`` (static).
    :param num_points: nodes of the Gauss–Hermite rule where no closed form exists (static, default 20).
    """

    _static = ("link", "num_points")
    LINKS = ("logit", "probit")

    @validated
    def __init__(self, link: Annotated[str, OneOf("logit", "probit")] = "logit", *, num_points: Count = 20):
        if link not in self.LINKS:
            raise ValueError(f"Bernoulli: link must be one of {self.LINKS}, got {link!r}")
        super().__init__(num_points=num_points)
        self._set(link=link)

    def _logits(self, f):
        f = jnp.asarray(f)
        if self.link == "logit":
            return f
        # logit(Φ(f)) = log Φ(f) − log Φ(−f), stable in both tails
        return log_ndtr(f) - log_ndtr(-f)

    def dist(self, f: ArrayLike):
        return dist.BernoulliLogits(logits=self._logits(f))

    def predict_mean_and_var(self, mean: ArrayLike, var: ArrayLike) -> tuple[jax.Array, jax.Array]:
        if self.link == "probit":
            p = ndtr(mean / jnp.sqrt(1.0 + var))  # p(y=1) = Φ(m / √(1+v))
        else:
            p = gauss_hermite(jax.nn.sigmoid, mean, var, self.num_points)
        return p, p * (1.0 - p)  # Var[y] = p(1 − p)

    def predict_log_density(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike) -> jax.Array:
        if self.link == "probit":
            z = mean / jnp.sqrt(1.0 + var)
            # log p(y) = log Φ((2y − 1) m / √(1+v))
            return log_ndtr((2.0 * y - 1.0) * z)
        return super().predict_log_density(y, mean, var)

    def _validate_values(self, arr, name):
        if not np.all((arr == 0) | (arr == 1)):
            bad = np.unique(arr[(arr != 0) & (arr != 1)])[:5]
            raise ValueError(f"{name}: labels must be 0 or 1, got values {bad.tolist()}")


class Poisson(Likelihood):
    r"""Counts with log link and exposure :math:`y \mid f \sim \mathrm{Poisson}(\Delta e^{f})`.

    Closed forms (VFF notes [2]):

    .. math::
        \mathbb E_q[\log p(y\mid f)] &= y(m + \log\Delta) - \Delta e^{m + v/2} - \log y!,\\
        \mathbb E[y] &= \Delta e^{m + v/2}, \qquad
        \mathrm{Var}[y] = \mathbb E[y] + \Delta^2 (e^{v} - 1) e^{2m + v}.

    The predictive log density is by Gauss–Hermite.

    :param exposure: :math:`\Delta > 0`, scalar or one per observation (then :meth:`subsample`
        indexes it).
    :param num_points: nodes of the Gauss–Hermite rule where no closed form exists (static, default 20).
    """

    _params = ("exposure",)
    _positive = ("exposure",)

    @validated
    def __init__(self, exposure: Annotated[Any, Template(rank=None)] = 1.0, *, num_points: Count = 20):
        super().__init__(num_points=num_points)
        self._set(exposure=exposure)

    def dist(self, f: ArrayLike):
        f = jnp.asarray(f)
        expo = self._param("exposure", _float_dtype(f))
        return dist.Poisson(expo * jnp.exp(f))

    def log_prob(self, y: ArrayLike, f: ArrayLike) -> jax.Array:
        f = jnp.asarray(f)
        expo = self._param("exposure", _float_dtype(f))
        y = _as_float(y, _float_dtype(f))
        # y (f + log Δ) − Δ e^f − log y!   (no underflow of the rate to 0)
        return y * (f + jnp.log(expo)) - expo * jnp.exp(f) - gammaln(y + 1.0)

    def variational_expectation(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike,
                                rng_key: Optional[jax.Array] = None) -> jax.Array:
        dtype = _float_dtype(mean, var)
        expo = self._param("exposure", dtype)
        y = _as_float(y, dtype)
        # y (m + log Δ) − Δ exp(m + v/2) − log y!
        return y * (mean + jnp.log(expo)) - expo * jnp.exp(mean + 0.5 * var) - gammaln(y + 1.0)

    def predict_mean_and_var(self, mean: ArrayLike, var: ArrayLike) -> tuple[jax.Array, jax.Array]:
        expo = self._param("exposure", _float_dtype(mean, var))
        ey = expo * jnp.exp(mean + 0.5 * var)  # E[y] = Δ e^{m + v/2}
        # Var[y] = E[y] + Δ² (e^v − 1) e^{2m + v}
        return ey, ey + expo**2 * jnp.expm1(var) * jnp.exp(2.0 * mean + var)

    def _validate_values(self, arr, name):
        if not np.all((arr >= 0) & (arr == np.floor(arr))):
            bad = np.unique(arr[(arr < 0) | (arr != np.floor(arr))])[:5]
            raise ValueError(f"{name}: counts must be non-negative integers, got values {bad.tolist()}")
        e = self.exposure
        if not isinstance(e, (Distribution, Param)) and np.ndim(e) >= 1 and np.shape(e) != arr.shape:
            raise ValueError(f"Poisson exposure has shape {np.shape(e)} but {name} has {arr.shape}: give one "
                             f"exposure per observation or a scalar")

    def subsample(self, idx: ArrayLike):
        e = self.exposure
        if isinstance(e, (Distribution, Param)) or jnp.ndim(e) == 0:
            return self
        return self.replace(exposure=jnp.asarray(e)[idx])


class StudentT(Likelihood):
    r"""Heavy-tailed noise :math:`y \mid f \sim \mathrm{StudentT}(\nu, f, s)`.

    Variational expectation and predictive log density by Gauss–Hermite. Predictive moments:

    .. math:: \mathbb E[y] = m, \qquad
              \mathrm{Var}[y] = v + s^2\,\frac{\nu}{\nu - 2}\ (\nu > 2), \quad \infty\ (\nu \le 2).

    Accuracy: the log-density has complex poles at :math:`f = y \pm i s\sqrt\nu`, so when :math:`v \gg s^2`
    raise ``num_points`` (at :math:`v/s^2 = 12`, :math:`\nu = 4`: 20 nodes err by ~1e-2 in the VE and
    ~0.1 in the log density; 100 nodes by ~1e-5 and ~1e-3).

    :param df: :math:`\nu > 0`.
    :param scale: :math:`s > 0`.
    """

    _params = ("df", "scale")
    _positive = ("df", "scale")

    @validated
    def __init__(self, df: PositiveScalar = 3.0, scale: PositiveScalar = 1.0, *, num_points: Count = 20):
        super().__init__(num_points=num_points)
        self._set(df=df, scale=scale)

    def dist(self, f: ArrayLike):
        f = jnp.asarray(f)
        dtype = _float_dtype(f)
        return dist.StudentT(self._param("df", dtype), f, self._param("scale", dtype))

    def predict_mean_and_var(self, mean: ArrayLike, var: ArrayLike) -> tuple[jax.Array, jax.Array]:
        dtype = _float_dtype(mean, var)
        nu, s = self._param("df", dtype), self._param("scale", dtype)
        safe = jnp.where(nu > 2.0, nu - 2.0, 1.0)  # keeps gradients finite in the unused branch
        noise = jnp.where(nu > 2.0, s**2 * nu / safe, jnp.inf)  # s² ν / (ν − 2)
        mean, var = jnp.broadcast_arrays(jnp.asarray(mean), jnp.asarray(var))
        return mean + jnp.zeros_like(noise), var + noise


# ---------------------------------------------------------------------------------------------------
# Multiclass likelihoods: f has a last axis of C latent values (SparseGP with num_latent_gps = C)
# ---------------------------------------------------------------------------------------------------
class MulticlassLikelihood(Likelihood):
    """Base of the C-class likelihoods: latent ``f`` of shape (..., C), labels in ``0..C-1``.

    :param num_classes: C >= 2 (static).
    :param num_points: nodes of the Gauss–Hermite rule where no closed form exists (static, default 20).
    """

    _static = ("num_classes", "num_points")

    @property
    def num_latent(self) -> int:
        """The number C of latent functions, one per class."""
        return self.num_classes

    @validated
    def __init__(self, num_classes: Annotated[int, Integer(2)], *, num_points: Count = 20):
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
            raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
        super().__init__(num_points=num_points)
        self._set(num_classes=int(num_classes))

    def _validate_values(self, arr, name):
        C = self.num_classes
        if not np.all((arr == np.floor(arr)) & (arr >= 0) & (arr < C)):
            bad = np.unique(arr[(arr != np.floor(arr)) | (arr < 0) | (arr >= C)])[:5]
            raise ValueError(f"{name}: labels must be integers in 0..{C - 1}, got values {bad.tolist()}")

    def class_probabilities(self, mean: ArrayLike, var: ArrayLike, rng_key: Optional[jax.Array] = None) -> jax.Array:
        """:math:`p(y = c) = \\int p(c\\mid\\mathbf f)q(\\mathbf f)d\\mathbf f`, shape (..., C)."""
        raise NotImplementedError

    def predict_mean_and_var(self, mean: ArrayLike, var: ArrayLike) -> tuple[jax.Array, jax.Array]:
        """The one-hot label's predictive mean (the class probabilities) and variance p(1 − p)."""
        p = self.class_probabilities(mean, var)
        return p, p * (1.0 - p)

    def predict_log_density(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike) -> jax.Array:
        """:math:`\\log p(y_n)` under the predictive, shape (N,)."""
        p = self.class_probabilities(mean, var)
        py = jnp.take_along_axis(p, jnp.asarray(y).astype(jnp.int32)[..., None], axis=-1)[..., 0]
        return jnp.log(py)


class Softmax(MulticlassLikelihood):
    r"""Softmax likelihood :math:`p(y\mid\mathbf f) = \mathrm{softmax}(\mathbf f)_y`.

    The variational expectation :math:`m_y - \mathbb E\,\operatorname{logsumexp}(\mathbf m +
    \sqrt{\mathbf v}\odot\boldsymbol\epsilon)` and the class probabilities
    :math:`\mathbb E\,\mathrm{softmax}(\mathbf f)` are Monte Carlo estimates with ``num_samples`` draws;
    pass a fresh ``key`` per evaluation for an unbiased stochastic ELBO (the model passes
    ``numpyro.prng_key()``), or none for a fixed key (deterministic, common random numbers).

    :param num_classes: C.
    :param num_samples: Monte Carlo draws (static).
    """

    _static = ("num_classes", "num_points", "num_samples")
    monte_carlo = True

    @validated
    def __init__(self, num_classes: Annotated[int, Integer(2)], *, num_samples: Count = 64):
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
        super().__init__(num_classes)
        self._set(num_samples=int(num_samples))

    def dist(self, f: ArrayLike):
        return dist.CategoricalLogits(jnp.asarray(f))

    def _draws(self, mean, var, rng_key, num_samples):
        rng_key = jax.random.PRNGKey(0) if rng_key is None else rng_key
        eps = jax.random.normal(rng_key, (num_samples,) + jnp.shape(mean), dtype=jnp.result_type(mean, float))
        return mean + jnp.sqrt(var) * eps

    def variational_expectation(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike,
                                rng_key: Optional[jax.Array] = None) -> jax.Array:
        y = jnp.asarray(y).astype(jnp.int32)
        m_y = jnp.take_along_axis(mean, y[..., None], axis=-1)[..., 0]
        lse = jnp.mean(logsumexp(self._draws(mean, var, rng_key, self.num_samples), axis=-1), axis=0)
        return m_y - lse  # E log softmax_y = m_y − E logsumexp(f)

    def class_probabilities(self, mean: ArrayLike, var: ArrayLike, rng_key: Optional[jax.Array] = None,
                            num_samples: Optional[int] = None) -> jax.Array:
        f = self._draws(mean, var, rng_key, num_samples or 4 * self.num_samples)
        return jnp.mean(jax.nn.softmax(f, axis=-1), axis=0)


class RobustMax(MulticlassLikelihood):
    r"""Robust-max likelihood: :math:`1-\epsilon` for the arg-max class, :math:`\epsilon/(C-1)` for
    each other one [2]; exact Gaussian integrals through the one-dimensional
    :math:`P_y = \mathbb E_{x\sim\mathcal N(m_y, v_y)}\prod_{c\ne y}\Phi((x-m_c)/\sqrt{v_c})`
    (Gauss–Hermite with ``num_points`` nodes).

    :param num_classes: C.
    :param epsilon: :math:`\epsilon\in(0, 1)` (default 1e-3, fixed, as in GPflow's ``RobustMax``).
    """

    _params = ("epsilon",)

    @validated
    def __init__(self, num_classes: Annotated[int, Integer(2)],
                 epsilon: Annotated[float, Real(0.0, 1.0, low_open=True, high_open=True)] = 1e-3, *,
                 num_points: Count = 20):
        super().__init__(num_classes, num_points=num_points)
        if is_concrete(epsilon) and not 0.0 < float(epsilon) < 1.0:
            raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
        self._set(epsilon=epsilon)

    def _probs(self, f):
        eps = self._param("epsilon", jnp.result_type(f, float))
        C = self.num_classes
        onehot = jax.nn.one_hot(jnp.argmax(f, axis=-1), C, dtype=eps.dtype)
        return onehot * (1.0 - eps) + (1.0 - onehot) * eps / (C - 1)

    def dist(self, f: ArrayLike):
        return dist.CategoricalProbs(self._probs(jnp.asarray(f)))

    def argmax_probability(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike) -> jax.Array:
        r""":math:`P_y = q(\arg\max_c f_c = y)` for labels y (N,), by Gauss–Hermite over :math:`f_y`."""
        y = jnp.asarray(y).astype(jnp.int32)
        mask = jax.nn.one_hot(y, self.num_classes, dtype=bool)
        sd = jnp.sqrt(jnp.maximum(var, 1e-30))
        m_y = jnp.take_along_axis(mean, y[..., None], axis=-1)[..., 0]
        v_y = jnp.take_along_axis(var, y[..., None], axis=-1)[..., 0]

        def others_below(x):  # x (P, N): Π_{c≠y} Φ((x − m_c)/s_c)
            z = (x[..., None] - mean) / sd
            return jnp.exp(jnp.sum(jnp.where(mask, 0.0, log_ndtr(z)), axis=-1))

        return gauss_hermite(others_below, m_y, v_y, self.num_points)

    def variational_expectation(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike,
                                rng_key: Optional[jax.Array] = None) -> jax.Array:
        eps = self._param("epsilon", jnp.result_type(mean, float))
        P = self.argmax_probability(y, mean, var)
        return P * jnp.log1p(-eps) + (1.0 - P) * jnp.log(eps / (self.num_classes - 1))

    def class_probabilities(self, mean: ArrayLike, var: ArrayLike, rng_key: Optional[jax.Array] = None) -> jax.Array:
        eps = self._param("epsilon", jnp.result_type(mean, float))
        C = self.num_classes
        P = jax.vmap(lambda c: self.argmax_probability(jnp.full(jnp.shape(mean)[:-1], c), mean, var),
                     out_axes=-1)(jnp.arange(C))
        return P * (1.0 - eps) + (1.0 - P) * eps / (C - 1)
