r"""Multiclass classification: C latent GPs, a softmax or robust-max likelihood, and a sparse GP over them.

**Likelihoods.** With latent :math:`\mathbf f = (f_1, \dots, f_C)` and label :math:`y\in\{0..C-1\}`:

* :class:`Softmax`: :math:`p(y\mid\mathbf f) = e^{f_y}/\sum_c e^{f_c}`. Under
  :math:`q(\mathbf f) = \prod_c\mathcal N(m_c, v_c)`,
  :math:`\mathbb E_q\log p(y\mid\mathbf f) = m_y - \mathbb E_q\operatorname{logsumexp}(\mathbf f)`;
  the second term has no closed form and is estimated by Monte Carlo (unbiased for a fresh key).
* :class:`RobustMax` [2, 3]: :math:`p(y\mid\mathbf f) = 1-\epsilon` if :math:`y = \arg\max_c f_c`, else
  :math:`\epsilon/(C-1)`. With :math:`P_y = q(\arg\max\mathbf f = y) = \int\mathcal N(x\mid m_y, v_y)
  \prod_{c\ne y}\Phi\big((x-m_c)/\sqrt{v_c}\big)\,dx` (one-dimensional: the library's Gauss–Hermite rule),
  :math:`\mathbb E_q\log p(y\mid\mathbf f) = P_y\log(1-\epsilon) + (1-P_y)\log\frac{\epsilon}{C-1}`
  exactly, and :math:`p(y) = P_y(1-\epsilon) + (1-P_y)\epsilon/(C-1)`. The paper's CIFAR experiments use
  it [1, §6.4].

**Model.** :class:`MulticlassSparseGP` places C independent GPs :math:`f_c` with one shared kernel (and
hyperparameters) and one shared inducing feature; each has its own inducing variables
:math:`\mathbf u_c` and its own :math:`q(\mathbf u_c)` from any q family (``"full"``, ``"diag"``,
``block_diagonal_covariance`` for harmonic features), as GPflow's SVGP with ``num_latent_gps = C``
used by the paper's code [1]. All classes live in one sample site of size C·M (whitened
:math:`\mathbf v\sim\mathcal N(0, I)`, or :math:`\mathbf u\sim\mathcal N(0, I_C\otimes K_{uu})` as a
block-diagonal operator), so the KL stays :func:`~ppl_sparsegp.gaussian_kl` over a
:class:`~ppl_sparsegp.linalg.BlockDiag`, and :func:`~ppl_sparsegp.conditional` is called once for all
classes (a matrix of inducing values, or ``vmap`` over the per-class q), so Kuf — the dominant cost —
is computed once. This is why it is a small class next to :class:`~ppl_sparsegp.SparseGP` rather than a
change to it: SparseGP's data term assumes one latent value per observation.

References:
    1. Sun, Shi, Wilson, Grosse (2021), Scalable variational Gaussian processes via harmonic kernel
       decomposition, ICML.
    2. Hernández-Lobato, Hernández-Lobato, Dupont (2011), Robust multi-class Gaussian process
       classification, NeurIPS.
    3. Hensman, Matthews, Ghahramani (2015), Scalable variational Gaussian process classification.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import log_ndtr, logsumexp
from numpyro import handlers

from ._module import is_concrete
from .approximations import GPModel, _require_params, _require_samples, resolve_q_family
from .conditionals import conditional
from .features.base import Kuu
from .gaussian import StructuredNormal, gaussian_kl
from .kernels import check_inputs
from .likelihoods import Likelihood, gauss_hermite
from .linalg import BlockDiag, Identity

__all__ = ["MulticlassLikelihood", "Softmax", "RobustMax", "MulticlassSparseGP"]


class MulticlassLikelihood(Likelihood):
    """Base of the C-class likelihoods: latent ``f`` of shape (..., C), labels in ``0..C-1``.

    :param num_classes: C >= 2 (static).
    """

    _static = ("num_classes", "num_points")

    def __init__(self, num_classes: int, *, num_points: int = 20):
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
            raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
        super().__init__(num_points=num_points)
        self._set(num_classes=int(num_classes))

    def _validate_values(self, arr, name):
        C = self.num_classes
        if not np.all((arr == np.floor(arr)) & (arr >= 0) & (arr < C)):
            bad = np.unique(arr[(arr != np.floor(arr)) | (arr < 0) | (arr >= C)])[:5]
            raise ValueError(f"{name}: labels must be integers in 0..{C - 1}, got values {bad.tolist()}")

    def class_probabilities(self, mean, var, key=None):
        """:math:`p(y = c) = \\int p(c\\mid\\mathbf f)q(\\mathbf f)d\\mathbf f`, shape (..., C)."""
        raise NotImplementedError

    def predict_mean_and_var(self, mean, var):
        """The one-hot label's predictive mean (the class probabilities) and variance p(1 − p)."""
        p = self.class_probabilities(mean, var)
        return p, p * (1.0 - p)

    def predict_log_density(self, y, mean, var):
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

    def __init__(self, num_classes: int, *, num_samples: int = 64):
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
        super().__init__(num_classes)
        self._set(num_samples=int(num_samples))

    def dist(self, f):
        return dist.CategoricalLogits(jnp.asarray(f))

    def _draws(self, mean, var, key, num_samples):
        key = jax.random.PRNGKey(0) if key is None else key
        eps = jax.random.normal(key, (num_samples,) + jnp.shape(mean), dtype=jnp.result_type(mean, float))
        return mean + jnp.sqrt(var) * eps

    def variational_expectation(self, y, mean, var, key=None):
        y = jnp.asarray(y).astype(jnp.int32)
        m_y = jnp.take_along_axis(mean, y[..., None], axis=-1)[..., 0]
        lse = jnp.mean(logsumexp(self._draws(mean, var, key, self.num_samples), axis=-1), axis=0)
        return m_y - lse  # E log softmax_y = m_y − E logsumexp(f)

    def class_probabilities(self, mean, var, key=None, num_samples=None):
        f = self._draws(mean, var, key, num_samples or 4 * self.num_samples)
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

    def __init__(self, num_classes: int, epsilon=1e-3, *, num_points: int = 20):
        super().__init__(num_classes, num_points=num_points)
        if is_concrete(epsilon) and not 0.0 < float(epsilon) < 1.0:
            raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
        self._set(epsilon=epsilon)

    def _probs(self, f):
        eps = self._param("epsilon", jnp.result_type(f, float))
        C = self.num_classes
        onehot = jax.nn.one_hot(jnp.argmax(f, axis=-1), C, dtype=eps.dtype)
        return onehot * (1.0 - eps) + (1.0 - onehot) * eps / (C - 1)

    def dist(self, f):
        return dist.CategoricalProbs(self._probs(jnp.asarray(f)))

    def argmax_probability(self, y, mean, var):
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

    def variational_expectation(self, y, mean, var, key=None):
        eps = self._param("epsilon", jnp.result_type(mean, float))
        P = self.argmax_probability(y, mean, var)
        return P * jnp.log1p(-eps) + (1.0 - P) * jnp.log(eps / (self.num_classes - 1))

    def class_probabilities(self, mean, var, key=None):
        eps = self._param("epsilon", jnp.result_type(mean, float))
        C = self.num_classes
        P = jax.vmap(lambda c: self.argmax_probability(jnp.full(jnp.shape(mean)[:-1], c), mean, var),
                     out_axes=-1)(jnp.arange(C))
        return P * (1.0 - eps) + (1.0 - P) * eps / (C - 1)


class MulticlassSparseGP(GPModel):
    r"""C independent sparse GPs (shared kernel and inducing feature) with a multiclass likelihood.

    Inducing site ``<name>_v`` (whitened, :math:`\mathcal N(0, I_{CM})`) or ``<name>_u``
    (:math:`\mathcal N(0, \mathrm{blockdiag}(K_{uu}, \dots))`), class-major; the guide gives each class its
    own q from ``q_cov`` (params ``<name>_v_<c>_loc`` ...). The data term is
    :math:`\sum_n\mathbb E_{p(\mathbf f_n\mid\mathbf u)}\log p(y_n\mid\mathbf f_n)` in a sub-sampled plate,
    so under ``TraceMeanField_ELBO`` the objective is the SVGP ELBO
    :math:`\sum_n\mathbb E_{q(\mathbf f_n)}\log p(y_n\mid\mathbf f_n) - \sum_c\mathrm{KL}(q(\mathbf u_c)\|
    p(\mathbf u_c))` [3].

    :param feature: an inducing feature (template).
    :param kernel: a kernel template, shared by the C latent functions.
    :param likelihood: a :class:`MulticlassLikelihood` (template).
    :param whiten: whitened parameterisation (default).
    :param q_cov: ``"full"``, ``"diag"`` or a q-family callable ``(name, dim, Kmm, whiten)``.
    """

    def __init__(self, feature, kernel, likelihood, mean=0.0, *, whiten: bool = True, q_cov="full",
                 name: str = "f"):
        if not isinstance(likelihood, MulticlassLikelihood):
            raise TypeError(f"likelihood must be a MulticlassLikelihood (Softmax, RobustMax), got "
                            f"{type(likelihood).__name__}")
        super().__init__(feature, kernel, likelihood, mean, name=name)
        self.whiten, self.q_family = whiten, resolve_q_family(q_cov)

    @property
    def num_latent(self) -> int:
        return self.likelihood.num_classes

    @property
    def site(self):
        return f"{self.name}_v" if self.whiten else f"{self.name}_u"

    def _dim(self, Kmm):
        return Kmm.sqrt_cols if self.whiten else Kmm.size

    def _prior(self, Kmm):
        C, dtype = self.num_latent, Kmm.dtype
        if self.whiten:
            return StructuredNormal(jnp.zeros(C * Kmm.sqrt_cols, dtype), Identity(C * Kmm.sqrt_cols, dtype))
        return StructuredNormal(jnp.zeros(C * Kmm.size, dtype), BlockDiag((Kmm,) * C))

    def _q(self, Kmm):
        """Per-class ``(loc, cov)`` lists from the q family (params ``<site>_<c>_...``)."""
        pairs = [self.q_family(f"{self.site}_{c}", self._dim(Kmm), Kmm, self.whiten) for c in range(self.num_latent)]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def _check_data(self, X, y, likelihood):
        X = check_inputs(X, "X")
        X = self.feature.check_inputs(X)
        if y is not None:
            y = jnp.asarray(y)
            if y.ndim != 1 or y.shape[0] != X.shape[0]:
                raise ValueError(f"y must be a vector of {X.shape[0]} labels, got shape {y.shape}")
            y = likelihood.validate(y, "y")
        return X, y

    def model(self, X, y=None, *, batch_size: int | None = None):
        """The joint model; with ``y=None`` it draws f (N, C) and the labels."""
        kernel, likelihood, feature, c = self.components()
        X, y = self._check_data(X, y, likelihood)
        Kmm = Kuu(feature, kernel)
        U = numpyro.sample(self.site, self._prior(Kmm)).reshape(self.num_latent, -1)
        N = X.shape[0]
        if batch_size is not None and not 0 < batch_size <= N:
            raise ValueError(f"batch_size must be in 1..{N}, got {batch_size}")
        with numpyro.plate("data", N, subsample_size=batch_size) as idx:
            Xb = X if batch_size is None else X[idx]
            mean, var = conditional(feature, kernel, Xb, U.T, whiten=self.whiten, Kmm=Kmm)  # (B, C), (B,)
            mean = mean + c
            var = jnp.broadcast_to(var[:, None], mean.shape)
            if y is None:
                f = numpyro.sample(self.name, dist.Normal(mean, jnp.sqrt(var + 1e-12)).to_event(1))
                numpyro.sample("y", likelihood.dist(f))
            else:
                yb = y if batch_size is None else y[idx]
                numpyro.factor("y", likelihood.variational_expectation(yb, mean, var, key=numpyro.prng_key()))

    def guide(self, X=None, y=None, *, batch_size: int | None = None):
        """Per-class Gaussian q over the inducing site, point estimates of the hyperparameters."""
        kernel, likelihood, feature, c = self.components(point=True)
        locs, covs = self._q(Kuu(feature, kernel))
        numpyro.sample(self.site, StructuredNormal(jnp.concatenate(locs), BlockDiag(tuple(covs))))

    # --- exact evaluation and prediction -----------------------------------------------------------
    def _marginals(self, feature, kernel, X, locs, covs, Kmm):
        """q(f(X)) marginals (N, C): one ``conditional`` vmapped over the classes' q (Kuf computed once)."""
        stacked = jax.tree.map(lambda *a: jnp.stack(a), *covs)
        return jax.vmap(lambda m, S: conditional(feature, kernel, X, m, S, whiten=self.whiten, Kmm=Kmm),
                        out_axes=-1)(jnp.stack(locs), stacked)

    def _fitted(self, params, method):
        _require_params(self, method, params)  # no silent initial values for missing params
        values = self.point_values(params)
        kernel, likelihood, feature, c = self.components_from(values)
        Kmm = Kuu(feature, kernel)
        with handlers.block(), handlers.substitute(data=values):
            locs, covs = self._q(Kmm)
        return kernel, likelihood, feature, c, Kmm, locs, covs

    def elbo(self, params: dict, X, y, key=None):
        """The ELBO :math:`\\sum_n\\mathbb E_{q}\\log p(y_n\\mid\\mathbf f_n) - \\sum_c\\mathrm{KL}_c` at
        SVI params (exact for RobustMax; Monte Carlo with ``key`` for Softmax)."""
        kernel, likelihood, feature, c, Kmm, locs, covs = self._fitted(params, "elbo")
        X, y = self._check_data(X, y, likelihood)
        mean, var = self._marginals(feature, kernel, X, locs, covs, Kmm)
        prior = Identity(self._dim(Kmm), dtype=Kmm.dtype) if self.whiten else Kmm
        kl = sum(gaussian_kl(m, S, prior) for m, S in zip(locs, covs))
        return jnp.sum(likelihood.variational_expectation(y, mean + c, var, key=key)) - kl

    def predict(self, X_new, *, params: dict | None = None, samples: dict | None = None):
        """Predictive marginals at X_new: ``f_mean``, ``f_var`` (N, C), ``y_mean`` (the class
        probabilities, N × C) and ``y_var`` (their p(1 − p)); ``samples``: mixed over posterior draws.
        A param of :meth:`guide` missing from ``params`` (a sampled site from ``samples``) raises
        ``ValueError``."""
        if (params is None) == (samples is None):
            raise ValueError("give exactly one of params= (SVI) or samples= (MCMC)")
        X_new = check_inputs(X_new, "X_new")
        if params is not None:
            kernel, likelihood, feature, c, Kmm, locs, covs = self._fitted(params, "predict")
            m, v = self._marginals(feature, kernel, X_new, locs, covs, Kmm)
            p = likelihood.class_probabilities(m + c, v)
            return {"f_mean": m + c, "f_var": v, "y_mean": p, "y_var": p * (1.0 - p)}

        def one(values):
            kernel, likelihood, feature, c = self.components_from(values)
            U = values[self.site].reshape(self.num_latent, -1)
            m, v = conditional(feature, kernel, X_new, U.T, whiten=self.whiten)
            v = jnp.broadcast_to(v[:, None], m.shape)
            return m + c, v, likelihood.class_probabilities(m + c, v)

        _require_samples(self, "predict", samples, self.site)
        ms, vs, ps = jax.lax.map(one, samples)
        p = ps.mean(0)
        return {"f_mean": ms.mean(0), "f_var": vs.mean(0) + ms.var(0), "y_mean": p, "y_var": p * (1.0 - p),
                "f_mean_draws": ms, "f_var_draws": vs}
