r"""The orthogonally decoupled sparse GP: a cheap basis U for most of f, inducing features V for the
residual orthogonal to it (Salimbeni et al. 2018 [1]; SOLVE-GP, Shi, Titsias & Mnih 2020 [2]; Tiao,
Dutordoir & Picheny 2023 [3]).

**The prior split.** With inducing variables u (of the basis U, M_u of them, e.g. spherical harmonic or
Fourier features whose Kuu is diagonal or diagonal + low rank) and v (of V, M_v inducing points), the
prior f = f_u + f_⊥ splits into the projection on u and the residual process, which is independent of u:

.. math::
    \mathbf v_\perp = \mathbf v - K_{vu}K_{uu}^{-1}\mathbf u \sim \mathcal N(0, C_{vv}),\quad
    C_{vv} = K_{vv} - K_{vu}K_{uu}^{-1}K_{uv},\qquad \operatorname{cov}(\mathbf u, \mathbf v_\perp) = 0,

and :math:`\operatorname{cov}(f(\mathbf x), \mathbf v_\perp) = \mathbf c_x^\top = K_{xv} - K_{xu}K_{uu}^{-1}K_{uv}`.
So :math:`p(f\mid\mathbf u,\mathbf v_\perp)` has mean :math:`K_{fu}K_{uu}^{-1}\mathbf u + \mathbf c_f
C_{vv}^{-1}\mathbf v_\perp` and variance :math:`k_{ff} - Q^u_{ff} - \mathbf c_f C_{vv}^{-1}\mathbf c_f^\top`
[2, eq. 9-10].

**The variational family.** :math:`q(\mathbf u, \mathbf v_\perp) = \mathcal N(\mathbf m_u, S_u)\,
\mathcal N(\mathbf m_v, S_v)`, independent [2, §3]:

.. math::
    \mathbb E[f] = K_{fu}K_{uu}^{-1}\mathbf m_u + \mathbf c_f C_{vv}^{-1}\mathbf m_v,\qquad
    \operatorname{Var}[f] = k_{ff} - Q^u_{ff} + K_{fu}K_{uu}^{-1}S_uK_{uu}^{-1}K_{uf}
    - \mathbf c_fC_{vv}^{-1}\mathbf c_f^\top + \mathbf c_fC_{vv}^{-1}S_vC_{vv}^{-1}\mathbf c_f^\top,

.. math::
    \mathrm{KL}[q(\mathbf u,\mathbf v)\,\|\,p(\mathbf u,\mathbf v)] = \mathrm{KL}[q(\mathbf u)\,\|\,
    \mathcal N(0, K_{uu})] + \mathrm{KL}[q(\mathbf v_\perp)\,\|\,\mathcal N(0, C_{vv})]

(the map (u, v) → (u, v_⊥) is linear with unit Jacobian, and both p and q factorise after it; the test
suite checks this against the dense KL of the joint). Whitened (default): u = R ε_u (R Rᵀ = Kuu, the
basis' structured square root) and v_⊥ = L_c ε_v (L_c = chol C_vv), both ε ~ N(0, I).

**Cost per step** on a minibatch of N_b rows: Kuu's own cost (O(M_u) for a diagonal Kuu; never a
dense M_u × M_u factorisation: only solves with Kuu's operator), O(M_u M_v²) for C_vv, O(M_v³) for its
Cholesky, O(N_b M_u) for the basis' mean and variance (mean-field q over U, the default for a diagonal
Kuu) and O(N_b M_u M_v) for :math:`\mathbf c_f` (one (N_b × M_u)(M_u × M_v) product: the term that
couples the two parts; it is what the issue's O(N_b (M_u + M_v)) leaves out). A full q over U costs
O(N_b M_u²) instead; SVGP on M_u + M_v inducing points O((M_u + M_v)³ + N_b (M_u + M_v)²). U's Kuf itself
(at the batch and V's points, one call) is the largest term for spherical harmonic features: O((N_b + M_v)
Σ_n N(d, n)²) for the per-degree inverse factors, not O(N_b M_u). Measured on kin8nm (M_u = 1 782,
Σ_n N(d, n)² = 1.49·10⁶, N_b = 512, M_v = 128, one core, float64): 19 ms for Kuf (1.9 GFLOP) in a 49 ms loss,
about 56 ms of its 101 ms gradient; the M_u M_v N_b product 5 ms, C_vv 1.3 ms, its Cholesky and the KL
under 0.1 ms each.

**Which pairs.** V's inducing variables must have a cross-covariance with U's registered in
:data:`cross_covariance`: for V = :class:`~ppl_sparsegp.features.InducingPoints` (any U)
:math:`K_{uv} = \operatorname{cov}(\mathbf u, f(Z)) = ` ``Kuf(U, kernel, Z)``; any other pair is refused at
construction, naming what is registered. U or V may be None: then the model is SVGP on the other one.

References:
    1. Salimbeni, Cheng, Boots, Deisenroth (2018), Orthogonally decoupled variational Gaussian
       processes, NeurIPS.
    2. Shi, Titsias, Mnih (2020), Sparse orthogonal variational inference for Gaussian processes
       (SOLVE-GP), AISTATS.
    3. Tiao, Dutordoir, Picheny (2023), Spherical inducing features for orthogonally-decoupled Gaussian
       processes, ICML.
"""
from __future__ import annotations

from typing import Annotated, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from ..conditionals import projection
from ..covariances import Dispatcher, Kuf, Kuu
from ..features.base import InducingFeature, current_feature
from ..features.inducing_points import InducingPoints
from ..gaussian import StructuredNormal, gaussian_kl
from ..kernels import check_inputs
from ..linalg import BlockDiag, Dense, Diagonal, Identity
from ..parameters import free_sites, instantiate
from ..sharding import is_distributed, map_rows
from ..validation import AFeature, AKernel, ALikelihood, AName, Flag, MaybeCount, OrNone, Real, validated
from .base import GPModel
from .common import (
    AnOperator,
    DataInputs,
    FittedParams,
    LatentMean,
    MaybeDraws,
    MaybeInputs,
    MaybeKey,
    MaybeParams,
    MaybeTargets,
    Targets,
    require_params,
    require_samples,
)
from .variational import QFamily, default_family, diagonal_covariance, full_covariance, q_cov_name, resolve_q_family

__all__ = ["OrthogonallyDecoupledGP", "cross_covariance", "basis_default_family"]

cross_covariance = Dispatcher("cross_covariance", r"""cross_covariance(basis, orthogonal, kernel)

:math:`K_{uv} = \operatorname{cov}(\mathbf u, \mathbf v)` between the inducing variables of two features
of one kernel, registered per (type of U, type of V) as ``cross_covariance.register(U, V)``.

:param basis: the feature U (M_u features); ``orthogonal``: the feature V (M_v); ``kernel``: concrete.
:returns: an (M_u, M_v) array.
:raises NotImplementedError: for a pair with no registration.""")


@cross_covariance.register(InducingFeature, InducingPoints)
def _cross_inducing_points(basis, orthogonal, kernel):
    """V = inducing points Z: cov(u, f(Z)) is U's own Kuf at Z."""
    return Kuf(basis, kernel, orthogonal.Z)


@validated
def basis_default_family(Kmm: AnOperator):
    """The q family ``q_cov_basis="auto"`` picks: mean field for a diagonal (or identity) Kuu, so that
    nothing over U costs more than O(M_u) per step (the basis is large by design); otherwise the family
    :func:`~ppl_sparsegp.approximations.variational.default_family` picks (full, or block-diagonal).

    :param Kmm: U's Kuu operator.
    :returns: a q family ``(name, dim, Kmm, whiten) -> (loc, S)``."""
    return diagonal_covariance if isinstance(Kmm, (Diagonal, Identity)) else default_family(Kmm)


def _basis_auto(name, dim, Kmm, whiten):
    return basis_default_family(Kmm)(name, dim, Kmm, whiten)


def _resolve(q_cov, auto, argument):
    if isinstance(q_cov, str) and q_cov == "auto":
        return auto
    try:
        return resolve_q_family(q_cov)
    except ValueError as err:
        raise ValueError(f"{argument}: {err}") from None


class Prior(NamedTuple):
    """What one step needs of the prior, data-free: Kuu (U), the solve G = Kuu⁻¹Kuv (M_u, M_v) and C_vv
    as a Dense operator (V); None for an absent part."""
    Kuu: object
    G: object
    C: object


def _check_feature(feature, argument):
    if feature is None:
        return None
    if not isinstance(feature, InducingFeature):
        raise TypeError(f"{argument} must be an InducingFeature or None, got {type(feature).__name__}")
    if feature.monte_carlo:
        raise ValueError(f"{argument}: {type(feature).__name__} estimates Kuf by Monte Carlo; the decoupled "
                         f"model needs an exact Kuf (use the family's deterministic quadrature)")
    return feature


#: U or V: an inducing feature, or None for an absent part
_MaybeFeature = Annotated[Any, OrNone(AFeature.__metadata__[0])]


class OrthogonallyDecoupledGP(GPModel):
    r"""The orthogonally decoupled sparse GP of [2, 3] (module docstring: the split, the family, the KL, the
    cost): f = f_u + f_⊥ with f_u on a basis U and f_⊥ on inducing features V, orthogonal to U.

    :param basis: U, an :class:`~ppl_sparsegp.features.InducingFeature` of many cheap features (a diagonal
        or structured Kuu: spherical harmonics with a zonal kernel, Hermite, Fourier), or None (SVGP on V).
    :param orthogonal: V, usually :class:`~ppl_sparsegp.features.InducingPoints` (any feature with a
        :data:`cross_covariance` registration for U), or None (SVGP on U).
    :param kernel: the kernel both features belong to (a template: numbers fixed, distributions priors,
        ``Param`` point estimates).
    :param likelihood: any :class:`~ppl_sparsegp.likelihoods.Likelihood` (default Gaussian).
    :param mean: a constant mean (a number or a prior, site ``mean``).
    :param whiten: parameterise u = R ε_u and v_⊥ = L_c ε_v (default) or u, v_⊥ themselves.
    :param q_cov_basis: q(u)'s family: ``"auto"`` (:func:`basis_default_family`: mean field for a
        diagonal Kuu, else as SparseGP), ``"full"``, ``"diag"``, ``"block-diag"``, ``"two-kron"`` or a
        callable (see :mod:`ppl_sparsegp.approximations.variational`).
    :param q_cov_orthogonal: q(v_⊥)'s family: ``"auto"`` (full) or as ``q_cov_basis``.
    :param num_latent_gps: L independent latent GPs sharing kernel and features (default: the likelihood's
        ``num_latent``, which it must match), as :class:`~ppl_sparsegp.SparseGP`'s.
    :param jitter: relative jitter added to C_vv's diagonal (times the mean of diag Kvv) before its
        Cholesky; default 1e-8 in float64, 1e-5 in float32 (C_vv is a difference, so it loses about
        κ(Kuu) ε of its precision to cancellation).
    :param name: the prefix of the inducing sites: ``<name>_basis_v`` and ``<name>_orthogonal_v``
        (whitened) or ``<name>_basis_u`` and ``<name>_orthogonal_u``.
    :raises TypeError: for a feature that is not an InducingFeature (or None), or a non-Kernel kernel.
    :raises ValueError: for both features None, a Monte Carlo feature, an unknown q family, a bad
        ``num_latent_gps`` or ``jitter``.
    :raises NotImplementedError: for a feature the kernel does not support, or a (U, V) pair without a
        cross-covariance (the message lists the registered pairs).
    """

    @validated
    def __init__(self, basis: _MaybeFeature, orthogonal: _MaybeFeature, kernel: AKernel,
                 likelihood: Annotated[Any, OrNone(ALikelihood.__metadata__[0])] = None, mean: LatentMean = 0.0, *,
                 whiten: Flag = True, q_cov_basis: QFamily = "auto", q_cov_orthogonal: QFamily = "auto",
                 num_latent_gps: MaybeCount = None, jitter: Annotated[Any, OrNone(Real(0.0, None))] = None,
                 name: AName = "f"):
        basis, orthogonal = _check_feature(basis, "basis"), _check_feature(orthogonal, "orthogonal")
        if basis is None and orthogonal is None:
            raise ValueError("basis and orthogonal are both None: give at least one feature (basis=None: SVGP on "
                             "the orthogonal feature; orthogonal=None: SVGP on the basis)")
        super().__init__(basis if basis is not None else orthogonal, kernel, likelihood, mean, name=name)
        if basis is not None and orthogonal is not None:
            Kuu.dispatch(orthogonal, kernel)
            orthogonal.check_kernel(kernel)
            self._check_pair(basis, orthogonal)
        if not isinstance(whiten, bool):
            raise ValueError(f"whiten must be True or False, got {whiten!r}")
        if jitter is not None and not (isinstance(jitter, (int, float, np.floating)) and np.isfinite(jitter)
                                       and jitter >= 0):
            raise ValueError(f"jitter must be a finite number >= 0 (relative to the mean of diag Kvv) or None, "
                             f"got {jitter!r}")
        self.basis, self.orthogonal, self.whiten, self.jitter = basis, orthogonal, whiten, jitter
        self.q_family_basis = _resolve(q_cov_basis, _basis_auto, "q_cov_basis")
        self.q_family_orthogonal = _resolve(q_cov_orthogonal, full_covariance, "q_cov_orthogonal")
        self.num_latent_gps = self._latent_count(num_latent_gps)
        if orthogonal is not None:
            self.hyperparameter_sites()

    @staticmethod
    def _check_pair(basis, orthogonal):
        try:
            cross_covariance.dispatch(basis, orthogonal)
        except NotImplementedError:
            pairs = sorted(f"({F.__name__}, {G.__name__})" for F, G in cross_covariance.registry)
            raise NotImplementedError(
                f"OrthogonallyDecoupledGP: no cross-covariance cov(u, v) between basis "
                f"{type(basis).__name__} and orthogonal {type(orthogonal).__name__}; registered pairs: "
                f"{', '.join(pairs)} (use InducingPoints for the orthogonal part, or register the pair with "
                f"cross_covariance.register)") from None

    def _latent_count(self, num_latent_gps):
        wanted = self.likelihood.num_latent
        L = wanted if num_latent_gps is None else num_latent_gps
        if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
            raise ValueError(f"num_latent_gps must be a positive int, got {num_latent_gps!r}")
        if L != wanted:
            raise ValueError(f"num_latent_gps={L} but the likelihood {type(self.likelihood).__name__} reads "
                             f"{wanted} latent value(s) per observation; use a multiclass likelihood (Softmax, "
                             f"RobustMax) with num_classes={L}, or leave num_latent_gps unset")
        return int(L)

    # --- sites --------------------------------------------------------------------------------------
    @property
    def sites(self) -> tuple:
        """The inducing sites present, as (basis site, orthogonal site); None for an absent part."""
        suffix = "v" if self.whiten else "u"
        return (None if self.basis is None else f"{self.name}_basis_{suffix}",
                None if self.orthogonal is None else f"{self.name}_orthogonal_{suffix}")

    def natural_gradient_sites(self) -> tuple:
        """The q sites' prefixes a :class:`~ppl_sparsegp.optim.NaturalGradient` steps (both parts, one per
        latent GP): the method it looks for on an approximation."""
        L = self.num_latent_gps
        return tuple(s if L == 1 else f"{s}_{l}" for s in self.sites if s is not None for l in range(L))

    def hyperparameter_sites(self) -> dict:
        """``{site: prior}`` for every sampled hyperparameter (V's fields as ``orthogonal_<field>``)."""
        out = super().hyperparameter_sites()
        if getattr(self, "orthogonal", None) is not None and self.feature is not self.orthogonal:
            out.update(free_sites(self.orthogonal, "orthogonal_"))
        return out

    def components(self, *, point: bool = False):
        """(kernel, likelihood, (U, V), mean) inside a model (or, point=True, a guide); U or V None when
        absent."""
        kernel, likelihood, feature, mean = super().components(point=point)
        if self.basis is None:
            return kernel, likelihood, (None, feature), mean
        V = None if self.orthogonal is None else current_feature(
            instantiate(self.orthogonal, "orthogonal_", point=point))
        return kernel, likelihood, (feature, V), mean

    def _check_data(self, X, y, likelihood):
        X, y = super()._check_data(X, y, likelihood)
        if self.basis is not None and self.orthogonal is not None and not hasattr(X, "points"):
            X = self.orthogonal.check_inputs(X)
        return X, y

    # --- the prior and the marginals ---------------------------------------------------------------
    def _prior(self, U, V, kernel, X=None):
        """Kuu, G = Kuu⁻¹Kuv and C_vv (Dense) for one set of hyperparameters; with rows ``X`` also U's Kuf
        there, computed in ONE Kuf call with V's points (a family's Kuf can carry a fixed cost per call: for
        spherical harmonics with a learnt lengthscale its gradient costs about as much for 64 rows as for
        256): returns ``(prior, Kuf(U, X) or None)``."""
        Ku = None if U is None else Kuu(U, kernel)
        if V is None or U is None:
            return Prior(Ku, None, None if V is None else Kuu(V, kernel)), None
        Kv, Kmn = Kuu(V, kernel), None
        Z = V.inducing_inputs  # point values (inducing points): Kuv is Kuf(U) at Z
        if X is not None and Z is not None and not hasattr(X, "points") and not is_distributed(X):
            K = Kuf(U, kernel, jnp.concatenate([Z, X], axis=0))
            Kuv, Kmn = K[:, :V.num_features], K[:, V.num_features:]
        else:
            Kuv = cross_covariance(U, V, kernel)
        G = Ku.solve(Kuv)                                           # Kuu⁻¹Kuv: solves only, no M_u³
        Kvv = Kv.to_dense()
        C = Kvv - Kuv.T @ G                                         # Eq. (9) [2]: C_vv
        C = 0.5 * (C + C.T)
        rel = self.jitter if self.jitter is not None else (1e-8 if jnp.finfo(C.dtype).bits == 64 else 1e-5)
        return Prior(Ku, G, Dense(C, jitter=rel * jnp.mean(jnp.diagonal(Kvv)))), Kmn

    def _projections(self, prior, U, V, kernel, X, Kmn=None):
        """Per-part (A, qff) with f's mean Σ Aᵀm and variance k − Σ qff + Σ diag(AᵀSA) (module docstring),
        and diag k(X, X); an absent part gives None. ``Kmn``: U's Kuf at X if already computed."""
        parts = [None, None]
        if U is not None:
            Kmn = Kuf(U, kernel, X) if Kmn is None else Kmn
            parts[0] = projection(U, kernel, X, whiten=self.whiten, Kmm=prior.Kuu, Kmn=Kmn)
        if V is not None:
            c = Kuf(V, kernel, X)
            if U is not None:
                c = c - prior.G.T @ Kmn                             # c_fᵀ = Kvf − Kvu Kuu⁻¹ Kuf
            parts[1] = projection(V, kernel, X, whiten=self.whiten, Kmm=prior.C, Kmn=c)
        return parts, kernel.diag(X)

    def _marginals(self, prior, U, V, kernel, X, locs, covs, Kmn=None):
        """q(f(X)) marginals ((N,), or (N, L)) for q means ``locs`` and covariances ``covs`` per part (one
        per latent GP: (L, M') means and a tuple of L operators); ``covs`` None: p(f | u, v_⊥) at
        ``locs``."""
        parts, kdiag = self._projections(prior, U, V, kernel, X, Kmn)
        L = self.num_latent_gps
        mean, var, extra = 0.0, kdiag, 0.0
        for part, loc, cov in zip(parts, locs, covs if covs is not None else (None, None)):
            if part is None:
                continue
            A, qff = part
            mean = mean + (A.T @ (loc if L == 1 else loc.T))          # Kfu Kuu⁻¹ m_u + c_f C⁻¹ m_v
            var = var - qff                                           # k − Q^u − c_f C⁻¹ c_fᵀ
            if cov is not None:                                       # + diag(Aᵀ S A) per part
                extra = extra + (jnp.sum(A * cov.matmul(A), axis=0) if L == 1 else
                                 jnp.stack([jnp.sum(A * S.matmul(A), axis=0) for S in cov], axis=-1))
        if L > 1:
            var = var[:, None]
        return mean, jnp.maximum(jnp.broadcast_to(var + extra, jnp.shape(mean)), 0.0)

    def _dims(self, prior):
        """(M_u', M_v): the sizes of the two sites per latent GP (0 for an absent part)."""
        du = 0 if prior.Kuu is None else (prior.Kuu.sqrt_cols if self.whiten else prior.Kuu.size)
        dv = 0 if prior.C is None else prior.C.size
        return du, dv

    def _inducing(self, prior):
        """Sample both inducing sites from the prior: whitened N(0, I); centred N(0, Kuu), N(0, C_vv)."""
        L, out = self.num_latent_gps, []
        for site, K, dim in zip(self.sites, (prior.Kuu, prior.C), self._dims(prior)):
            if site is None:
                out.append(None)
                continue
            cov = Identity(L * dim, K.dtype) if self.whiten else (K if L == 1 else BlockDiag((K,) * L))
            value = numpyro.sample(site, StructuredNormal(jnp.zeros(L * dim, K.dtype), cov))
            out.append(value if L == 1 else value.reshape(L, dim))
        return out

    @validated
    def model(self, X: DataInputs, y: MaybeTargets = None, *, batch_size: MaybeCount = None):
        """The joint model: hyperparameter sites, the two inducing sites, and the likelihood of y given
        :math:`p(f\\mid\\mathbf u,\\mathbf v_\\perp)` in a (sub-sampled) data plate, scaled by N / batch_size.

        :param X: inputs (N, D).
        :param y: targets (N,) (class labels for a multiclass likelihood), or None to draw f and y.
        :param batch_size: rows per minibatch (``numpyro.plate`` subsampling), or None for all N.
        :raises ValueError: for bad data or a ``batch_size`` that is not an int in 1..N.
        """
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, (int, np.integer))):
            raise ValueError(f"batch_size must be a positive int (rows per minibatch) or None, got "
                             f"{batch_size!r} of type {type(batch_size).__name__}")
        kernel, likelihood, (U, V), c = self.components()
        X, y = self._check_data(X, y, likelihood)
        N, L = X.shape[0], self.num_latent_gps
        if batch_size is not None and not 0 < batch_size <= N:
            raise ValueError(f"batch_size must be in 1..{N}, got {batch_size}")
        data = numpyro.plate("data", N, subsample_size=batch_size)  # the minibatch is drawn here
        with data as idx:
            Xb = X if batch_size is None else X[idx]
        prior, Kmn = self._prior(U, V, kernel, Xb)
        locs = self._inducing(prior)
        rng_key = numpyro.prng_key() if (y is not None and likelihood.monte_carlo) else None
        with data:
            if Kmn is not None:  # U's Kuf at the batch came with Kuv (one call)
                mean, var = self._marginals(prior, U, V, kernel, Xb, locs, None, Kmn)
            else:
                mean, var = map_rows(lambda Xs: self._marginals(prior, U, V, kernel, Xs, locs, None), Xb)
            mean = mean + c
            lik = likelihood if batch_size is None else likelihood.subsample(idx)
            if y is None:
                fd = dist.Normal(mean, jnp.sqrt(var + 1e-12))
                f = numpyro.sample(self.name, fd if L == 1 else fd.to_event(1))
                numpyro.sample("y", lik.dist(f))
            else:
                yb = y if batch_size is None else y[idx]
                ve = lik.variational_expectation(yb, mean, var, rng_key=rng_key) if lik.monte_carlo else \
                    lik.variational_expectation(yb, mean, var)
                numpyro.factor("y", ve)

    def _q_all(self, prior):
        """Per part: (loc (L, M') or (M',), covariance operator or tuple of L); creates the q params."""
        L, out = self.num_latent_gps, []
        families = (self.q_family_basis, self.q_family_orthogonal)
        for site, K, dim, family in zip(self.sites, (prior.Kuu, prior.C), self._dims(prior), families):
            if site is None:
                out.append((None, None))
                continue
            if L == 1:
                out.append(family(site, dim, K, self.whiten))
                continue
            pairs = [family(f"{site}_{l}", dim, K, self.whiten) for l in range(L)]
            out.append((jnp.stack([p[0] for p in pairs]), tuple(p[1] for p in pairs)))
        return out

    def _guide_prior(self, U, V, kernel):
        """The prior parts a guide needs: whitened, only Kuu and V's size (C_vv is not formed)."""
        if not self.whiten or V is None:
            return self._prior(U, V, kernel)[0]
        Ku = None if U is None else Kuu(U, kernel)
        dtype = jnp.result_type(float) if Ku is None else Ku.dtype
        return Prior(Ku, None, Identity(V.num_features, dtype))

    @validated
    def guide(self, X: MaybeInputs = None, y: MaybeTargets = None, *, batch_size: MaybeCount = None):
        """Independent Gaussians q(u) and q(v_⊥) (one per latent GP, families ``q_cov_basis`` and
        ``q_cov_orthogonal``) and point estimates of the hyperparameters."""
        kernel, likelihood, (U, V), c = self.components(point=True)
        for site, (loc, cov) in zip(self.sites, self._q_all(self._guide_prior(U, V, kernel))):
            if site is None:
                continue
            if self.num_latent_gps > 1:
                loc, cov = loc.reshape(-1), BlockDiag(cov)
            numpyro.sample(site, StructuredNormal(loc, cov))

    # --- exact evaluation and prediction -----------------------------------------------------------
    def _fitted(self, params: dict, method: str, X=None):
        """(kernel, likelihood, (U, V), c, prior, q, Kmn) at SVI params (all the guide's: else
        ``ValueError``); Kmn: U's Kuf at the rows X, or None (see :meth:`_prior`)."""
        require_params(self, method, params)
        values = self.point_values(params)
        kernel, likelihood, (U, V), c = self.components_from(values)
        prior, Kmn = self._prior(U, V, kernel, X)
        with handlers.block(), handlers.substitute(data=values):
            q = self._q_all(prior)
        return kernel, likelihood, (U, V), c, prior, q, Kmn

    @validated
    def kl(self, params: FittedParams):
        r""":math:`\mathrm{KL}[q(\mathbf u)\|p(\mathbf u)] + \mathrm{KL}[q(\mathbf v_\perp)\|
        \mathcal N(0, C_{vv})]` at SVI params (module docstring), summed over the latent GPs.

        :param params: ``svi_result.params`` of :meth:`guide`.
        :returns: a scalar.
        :raises ValueError: when ``params`` lacks a param of :meth:`guide`."""
        *_, prior, q, _ = self._fitted(params, "kl")
        return self._kl(prior, q)

    def _kl(self, prior, q):
        total = 0.0
        for (loc, cov), K in zip(q, (prior.Kuu, prior.C)):
            if loc is None:
                continue
            locs, covs = (loc[None], (cov,)) if self.num_latent_gps == 1 else (loc, cov)
            for m, S in zip(locs, covs):
                total = total + gaussian_kl(m, S, Identity(S.size, S.dtype) if self.whiten else K)
        return total

    @validated
    def elbo(self, params: FittedParams, X: DataInputs, y: Targets, rng_key: MaybeKey = None, *,
             num_data: MaybeCount = None):
        r"""The ELBO :math:`\sum_n\mathbb E_{q(f_n)}\log p(y_n\mid f_n) - \mathrm{KL}` (:meth:`kl`) at SVI
        params; exact for closed-form likelihoods, Gauss–Hermite otherwise, Monte Carlo with ``rng_key`` for a
        Monte Carlo likelihood. With ``num_data`` = N, (X, y) is a minibatch scaled by N / len(X).

        :param params: ``svi_result.params`` of :meth:`guide`.
        :param X: inputs (N_b, D); ``y``: targets (N_b,).
        :param rng_key: PRNG key for a Monte Carlo likelihood (Softmax).
        :param num_data: the size of the data set (X, y) were drawn from, or None.
        :raises ValueError: for bad data, or ``params`` lacking a param of :meth:`guide`."""
        X, y = self._check_data(X, y, self.likelihood)
        kernel, likelihood, (U, V), c, prior, q, Kmn = self._fitted(params, "elbo", X)
        locs, covs = [p[0] for p in q], [p[1] for p in q]
        if Kmn is not None:
            mean, var = self._marginals(prior, U, V, kernel, X, locs, covs, Kmn)
        else:
            mean, var = map_rows(lambda Xs: self._marginals(prior, U, V, kernel, Xs, locs, covs), X)
        ve = likelihood.variational_expectation(y, mean + c, var, rng_key=rng_key) if likelihood.monte_carlo \
            else likelihood.variational_expectation(y, mean + c, var)
        scale = 1.0 if num_data is None else num_data / X.shape[0]
        return scale * jnp.sum(ve) - self._kl(prior, q)

    @validated
    def constructor_argument(self, name: AName):
        """:meth:`~ppl_sparsegp.GPModel.constructor_argument`; ``q_cov_basis``/``q_cov_orthogonal`` are the
        names of the q families.

        :raises ValueError: for a user-defined q family (no name rebuilds it)."""
        if name in ("q_cov_basis", "q_cov_orthogonal"):
            family = self.q_family_basis if name == "q_cov_basis" else self.q_family_orthogonal
            auto = _basis_auto if name == "q_cov_basis" else full_covariance
            return "auto" if family is auto else q_cov_name(family)
        return super().constructor_argument(name)

    @validated
    def predict(self, X_new: DataInputs, *, params: MaybeParams = None, samples: MaybeDraws = None):
        """Predictive marginals at X_new (the library's one signature).

        :param X_new: inputs (N, D).
        :param params: SVI params (``svi_result.params``): q(u) q(v_⊥) used analytically.
        :param samples: posterior draws of the sites (MCMC): per-draw p(f | u, v_⊥) marginals, mixed.
        :returns: dict with ``f_mean``, ``f_var``, ``y_mean``, ``y_var`` ((N,), or (N, L)).
        :raises ValueError: for neither or both of params/samples, or either lacking an entry."""
        if (params is None) == (samples is None):
            raise ValueError("give exactly one of params= (SVI) or samples= (MCMC)")
        X_new = self.feature.warn_outside(check_inputs(X_new, "X_new"), kernel=self.kernel)
        if params is not None:
            kernel, likelihood, (U, V), c, prior, q, Kmn = self._fitted(params, "predict", X_new)
            m, v = self._marginals(prior, U, V, kernel, X_new, [p[0] for p in q], [p[1] for p in q], Kmn)
            ym, yv = likelihood.predict_mean_and_var(m + c, v)
            return {"f_mean": m + c, "f_var": v, "y_mean": ym, "y_var": yv}
        L = self.num_latent_gps

        def one(values):
            kernel, likelihood, (U, V), c = self.components_from(values)
            prior, Kmn = self._prior(U, V, kernel, X_new)
            locs = [None if s is None else (values[s] if L == 1 else values[s].reshape(L, -1))
                    for s in self.sites]
            m, v = self._marginals(prior, U, V, kernel, X_new, locs, None, Kmn)
            ym, yv = likelihood.predict_mean_and_var(m + c, v)
            return m + c, v, ym, yv

        require_samples(self, "predict", samples, *[s for s in self.sites if s is not None])
        ms, vs, yms, yvs = jax.lax.map(one, samples)
        return {"f_mean": ms.mean(0), "f_var": vs.mean(0) + ms.var(0),  # law of total variance
                "y_mean": yms.mean(0), "y_var": yvs.mean(0) + yms.var(0),
                "f_mean_draws": ms, "f_var_draws": vs}
