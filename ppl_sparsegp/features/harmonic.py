r"""Harmonic features: inducing variables of the orthogonal sub-kernels of a harmonic kernel decomposition.

For a kernel k invariant under a finite cyclic group :math:`\{G^{\mathbf s}\}` (see
:mod:`ppl_sparsegp.groups`), the real sub-kernels

.. math::

    k_t(\mathbf x,\mathbf x') = \sum_{\mathbf s} W_{t\mathbf s}\, k(\mathbf x, G^{\mathbf s}\mathbf x'),
    \qquad \sum_t k_t = k,

are positive semi-definite, and the GP splits into independent parts :math:`f = \sum_t f_t`,
:math:`f_t\sim\mathcal{GP}(0, k_t)` [1, Thm 3.5, §3.4–3.5]. The inducing variables
:math:`\mathbf u_t = f_t(Z_t) = \sum_{\mathbf s} W_{t\mathbf s} f(G^{\mathbf s}Z_t)` (one set of m inducing
inputs per sub-kernel, or one set Z shared by all) have

.. math::

    [K_{t,uu}]_{ij} = \sum_{\mathbf s} W_{t\mathbf s}\, k(\mathbf z_{t,i}, G^{\mathbf s}\mathbf z_{t,j}),\qquad
    [K_{t,uf}]_{in} = \sum_{\mathbf s} W_{t\mathbf s}\, k(G^{\mathbf s}\mathbf z_{t,i}, \mathbf x_n),\qquad
    \operatorname{cov}(\mathbf u_t, \mathbf u_{t'}) = 0\ (t\ne t'),

so :math:`K_{uu}` is a :class:`~ppl_sparsegp.linalg.BlockDiag` of T dense m×m blocks (whitening and
solves cost :math:`T m^3`, not :math:`(Tm)^3`) and :math:`K_{uf}` stacks the T blocks. With
:func:`block_diagonal_covariance` as the q family, the generic :class:`~ppl_sparsegp.SparseGP` *is* the
harmonic variational GP (HVGP) [1, §4.2]: :math:`q(\mathbf u) = \prod_t\mathcal N(\boldsymbol\mu_t,
S_t)`, KL summed over blocks, and the predictive
:math:`\mu(\mathbf x) = \sum_t A_t^\top\boldsymbol\mu_t`,
:math:`\sigma^2(\mathbf x) = k(\mathbf x,\mathbf x) - \sum_t K_{t,fu}K_{t,uu}^{-1}K_{t,uf} + \sum_t
A_t^\top S_t A_t`.

The kernel must be invariant under the group, and stay invariant while its hyperparameters are learnt or
sampled. Kuu and Kuf check the kernel's *structure* on every call, under ``jit`` too (shapes are static): a
kernel with one lengthscale per input dimension (a lengthscale of shape (D,), D > 1, or a sum or product
of per-dimension kernels) is refused unless every way of the group only flips coordinate signs
(:meth:`~ppl_sparsegp.groups.Group.coordinate_sign_flips`), since the sub-kernels stop being PSD, and
every loss turns NaN, as soon as the lengthscales differ (:meth:`HarmonicFeatures.check_kernel`, which
also takes kernel templates). Kuu also checks invariance at the kernel's values on a random probe whenever
the kernel and Z are concrete. Both raise ``ValueError``.

References:
    1. Sun, Shi, Wilson, Grosse (2021), Scalable variational Gaussian processes via harmonic kernel
       decomposition, ICML.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike
from numpyro.distributions import Distribution

from ..covariances import Kuf, Kuu
from ..groups import Group
from ..kernels import Additive, Kernel, Product, Stationary, check_inputs
from ..linalg import StackedBlockDiag
from ..parameters import Param, is_concrete
from ..validation import (
    AKernel,
    AName,
    AnyOf,
    ArrayOf,
    Check,
    Inputs,
    InstanceOf,
    OrNone,
    Real,
    WrongArgumentType,
    validated,
)
from .base import InducingFeature
from .float32 import warn_float32

__all__ = ["HarmonicFeatures", "harmonic_gram", "check_invariance", "per_dimension_parameters"]



class _AGroup(Check):
    """A :class:`~ppl_sparsegp.groups.Group`."""

    allowed = "a ppl_sparsegp.groups.Group (e.g. groups.Negation())"

    def problem(self, value):
        return None if isinstance(value, Group) else (WrongArgumentType, f"of type {type(value).__name__}")

    def bad_values(self):
        return [3, "x", None]

    def example(self):
        from ..groups import Negation
        return Negation()


AGroup = Annotated[Any, _AGroup()]
MaybeInputs = Annotated[Any, OrNone(Inputs.__metadata__[0])]


@validated
def harmonic_gram(group: AGroup, kernel: AKernel, X1: Inputs, X2: MaybeInputs = None):
    r"""The real sub-kernel Gram matrices :math:`[k_t(X_1, X_2)]_t`, shape (T, N1, N2).

    :math:`k_t(\mathbf x,\mathbf x') = \sum_{\mathbf s} W_{t\mathbf s}\,k(\mathbf x, G^{\mathbf s}
    \mathbf x')` (Eqs. 5–6 with the real pairing of §3.4 [1]).
    """
    X1 = check_inputs(X1, "X1")
    X2 = X1 if X2 is None else check_inputs(X2, "X2")
    W = jnp.asarray(group.weights(), dtype=jnp.result_type(X1.dtype, float))
    O = group.orbit(X2)  # (T̃, N2, D)
    K = kernel(X1, O.reshape(-1, X2.shape[1])).reshape(X1.shape[0], group.orbit_size, X2.shape[0])
    return jnp.einsum("ts,isj->tij", W, K)  # Eq. (5) [1], real-paired


@validated
def check_invariance(group: AGroup, kernel: AKernel, X: Annotated[Any, ArrayOf()], *,
                      rtol: Annotated[Any, OrNone(Real(0.0, None, low_open=True))] = None):
    """Raise ``ValueError`` unless :math:`k(G\\mathbf x, G\\mathbf x') = k(\\mathbf x, \\mathbf x')` for
    every way G of the group on a random probe around the points X (..., D). Concrete values only; runs
    eagerly even while tracing.

    :param rtol: tolerance relative to the largest prior variance (default 1e-7 in float64, 1e-3 in
        float32).
    """
    with jax.ensure_compile_time_eval():  # concrete values: evaluate now, even while tracing
        X = np.asarray(X)
        _check_invariance(group, kernel, np.asarray(check_inputs(X.reshape(-1, X.shape[-1]), "X")), rtol)


@partial(jax.jit, static_argnums=0)
def _invariance_errors(group, kernel, probe):
    """max |k(Gx, Gx') − k(x, x')| for every way G, and the largest prior variance (one compilation)."""
    K = kernel(probe)
    errors = jnp.stack([jnp.max(jnp.abs(kernel(way.power(probe, 1)) - K)) for way in group.ways])
    return errors, jnp.max(jnp.abs(jnp.diagonal(K)))


def _check_invariance(group, kernel, X, rtol):
    rng = np.random.default_rng(0)
    centre, spread = X.mean(0), X.std(0) + 1e-3
    probe = np.concatenate([X[: min(len(X), 12)], centre + spread * rng.normal(size=(12, X.shape[1]))])
    errors, scale = _invariance_errors(group, kernel, jnp.asarray(probe, dtype=X.dtype))
    if rtol is None:
        rtol = 1e-7 if jnp.finfo(errors.dtype).bits == 64 else 1e-3
    for way, err in zip(group.ways, np.asarray(errors)):
        if not err <= rtol * float(scale):
            raise ValueError(
                f"kernel {type(kernel).__name__} is not invariant under {way!r}: max |k(Gx, Gx') - k(x, x')| "
                f"= {err:.3g} (relative {err / float(scale):.3g}) on a random probe. The harmonic decomposition "
                "needs a G-invariant kernel: for reflections or rotations off the coordinate axes use one "
                "(isotropic) lengthscale; for longitude rotations use kernels.SphereEmbedded")


def _shape(value):
    """The shape of a parameter value: an array, a tracer, a Param's initial value or a prior's draws."""
    if isinstance(value, Param):
        return tuple(np.shape(value.init))
    if isinstance(value, Distribution):
        return tuple(value.shape())
    return tuple(np.shape(value))


@validated
def per_dimension_parameters(kernel: AKernel, prefix: AName = "kernel_") -> list:
    """``[(site, description)]`` for every part of a kernel (or kernel template) with one value per input
    dimension: a stationary lengthscale of size > 1 (array, tracer, Param or Distribution; only shapes
    are read, so it works under ``jit``) or a sum/product of per-dimension kernels. Site names follow
    :func:`~ppl_sparsegp.parameters.instantiate` (``kernel_lengthscale``, ``kernel_base_lengthscale``)."""
    found = []

    def walk(k, pre):
        if isinstance(k, (Additive, Product)):
            if len(k.kernels) > 1:
                found.append((pre.rstrip("_"), f"a {type(k).__name__} of {len(k.kernels)} one-dimensional "
                                               "kernels (one lengthscale per input dimension)"))
            for i, sub in enumerate(k.kernels):
                walk(sub, f"{pre}{i}_")
            return
        if isinstance(k, Stationary):
            shape = _shape(k.lengthscale)
            if math.prod(shape) > 1:
                found.append((f"{pre}lengthscale", f"lengthscale of shape {shape} (one per input dimension)"))
        for name in getattr(k, "_params", ()):
            value = getattr(k, name)
            if isinstance(value, Kernel):
                walk(value, f"{pre}{name}_")

    walk(kernel, prefix)
    return found


class HarmonicFeatures(InducingFeature):
    r"""Inducing variables of the T real sub-kernels of the harmonic decomposition of k over ``group``.

    :param group: a :class:`~ppl_sparsegp.groups.Group` (static; its ways must commute and be cyclic).
    :param Z: inducing inputs: (T, m, D), one set per real sub-kernel (T = ``group.num_subkernels``), or
        (m, D), shared by all of them; an array (fixed) or a :class:`~ppl_sparsegp.Param` (optimised).
    :param jitter: relative jitter ε; :math:`\epsilon\sigma_k^2 I` is added to every block of Kuu
        (default 1e-10 in float64, 1e-5 in float32).
    """

    _params = ("Z",)
    _static = ("group", "jitter")

    @validated
    def __init__(self, group: AGroup, Z: Annotated[Any, AnyOf(ArrayOf(rank=(2, 3), traced=False),
                                                             InstanceOf(Param, what="a Param"))],
                 jitter: Annotated[Any, OrNone(Real(0.0, None))] = None):
        if not isinstance(group, Group):
            raise ValueError(f"group must be a ppl_sparsegp.groups.Group, got {type(group).__name__}")
        Zc = Z.init if isinstance(Z, Param) else Z
        if is_concrete(Zc):
            Zn = np.asarray(Zc, dtype=np.float64)  # validation in NumPy: no tracing, no compilation
            T = group.num_subkernels
            if Zn.ndim == 3 and Zn.shape[0] != T:
                raise ValueError(f"Z has {Zn.shape[0]} sets of inducing inputs, but the group has {T} real "
                                 f"sub-kernels: give Z of shape ({T}, m, D) or a shared (m, D)")
            if Zn.ndim not in (2, 3):
                raise ValueError(f"Z must have shape (m, D) or ({T}, m, D), got {Zn.shape}")
            check_inputs(Zn.reshape(-1, Zn.shape[-1]), "Z")
            group.check(Zn.shape[-1], scale=float(np.std(Zn)) or 1.0)
            if not isinstance(Z, Param):
                Z = jnp.asarray(Z, dtype=jnp.result_type(float))
        if jitter is not None and not (np.isfinite(jitter) and jitter >= 0):
            raise ValueError(f"jitter must be a non-negative number, got {jitter!r}")
        self._set(Z=Z, group=group, jitter=jitter)

    def _Z(self):
        return self.Z.init if isinstance(self.Z, Param) else self.Z

    @property
    def shared(self) -> bool:
        """True when one set of inducing inputs serves every sub-kernel."""
        return jnp.ndim(self._Z()) == 2

    @property
    def num_inducing(self) -> int:
        """m, the inducing variables per sub-kernel."""
        return self._Z().shape[-2]

    @property
    def num_features(self):
        return self.group.num_subkernels * self.num_inducing

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        D = self._Z().shape[-1]
        if X.shape[1] != D:
            raise ValueError(f"{name} has {X.shape[1]} input dimensions, the inducing inputs have {D}")
        return X

    def check_kernel(self, kernel: Kernel):
        """Raise ``ValueError`` when the group can lose its invariance while the kernel's hyperparameters
        move: a kernel (or kernel template) with per-dimension lengthscales, and a group whose ways are not
        all coordinate sign flips (:meth:`~ppl_sparsegp.groups.Group.coordinate_sign_flips`). Reads shapes
        only, so it runs under ``jit`` and on templates (Params and Distributions). Returns the kernel."""
        per_dim = per_dimension_parameters(kernel)
        if not per_dim:
            return kernel
        D = self._Z().shape[-1]
        if self.group.coordinate_sign_flips(D):
            return kernel
        bad = [w for w in self.group.ways if not w.coordinate_sign_flips(D)]
        site, what = per_dim[0]
        raise ValueError(
            f"HarmonicFeatures: the kernel has a {what} (site {site!r}), but the group's way {bad[0]!r} is "
            "not invariant under per-dimension lengthscales: the kernel is G-invariant only while the "
            "lengthscales are equal, and once they are learnt or sampled apart the sub-kernels stop being "
            "PSD and every loss is NaN. Use a scalar lengthscale (one isotropic kernel) with Rotation, "
            "reflections off the coordinate axes, image flips/shifts or longitude rotations, or a group "
            "that is invariant per dimension (groups.Negation(), groups.coordinate_negation)")

    def relative_jitter(self, dtype: DTypeLike):
        if self.jitter is not None:
            return self.jitter
        return 1e-10 if jnp.finfo(dtype).bits == 64 else 1e-5

    @validated
    def orbit_gram(self, kernel: AKernel, X: Inputs):
        r""":math:`k(G^{\mathbf s}\mathbf z, \mathbf x)` for every group element and inducing input,
        shape (T̃, m, N) (shared Z) or (T̃, T, m, N)."""
        Z = self.Z
        O = self.group.orbit(Z)
        K = kernel(O.reshape(-1, Z.shape[-1]), X)
        return K.reshape(O.shape[:-1] + (X.shape[0],))

    @validated
    def sub_kernel_blocks(self, kernel: AKernel):
        """The T blocks :math:`K_{t,uu}` without jitter, shape (T, m, m)."""
        Z, group = self.Z, self.group
        W = jnp.asarray(group.weights(), dtype=jnp.result_type(Z.dtype, float))
        D, m, Tt = Z.shape[-1], Z.shape[-2], group.orbit_size
        O = group.orbit(Z)
        if Z.ndim == 2:
            K = kernel(Z, O.reshape(-1, D)).reshape(m, Tt, m)
            Kt = jnp.einsum("ts,isj->tij", W, K)  # [K_t,uu]_ij = Σ_s W_ts k(z_i, G^s z_j) (notes §1 [1])
        else:  # block t needs k(Z_t, G^s Z_t) only
            K = jax.vmap(lambda z, o: kernel(z, o.reshape(-1, D)))(Z, jnp.swapaxes(O, 0, 1))
            Kt = jnp.einsum("ts,tisj->tij", W, K.reshape(Z.shape[0], m, Tt, m))  # Σ_s W_ts k(z_ti, G^s z_tj)
        return 0.5 * (Kt + jnp.swapaxes(Kt, -1, -2))  # symmetric in exact arithmetic


@Kuu.register(HarmonicFeatures, Kernel)
def _kuu_harmonic(feature, kernel):
    feature.check_kernel(kernel)  # structure (shapes): also under jit, where the value check is skipped
    Z = feature.Z
    if is_concrete(kernel) and is_concrete(Z):
        check_invariance(feature.group, kernel, Z)
    Kt = feature.sub_kernel_blocks(kernel)
    m = Kt.shape[-1]
    warn_float32(Kt.dtype, m > 100, f"HarmonicFeatures in float32 with m = {m} > 100 inducing inputs per "
                 "sub-kernel: measured against float64, the bounds and log densities drift silently past "
                 "m = 100 (up to 9e-3 relative at m = 300)")
    eps = feature.relative_jitter(Kt.dtype) * jnp.mean(kernel.diag(Z.reshape(-1, Z.shape[-1])))
    return StackedBlockDiag(Kt, jitter=eps)  # one batched Cholesky of the T blocks


@Kuf.register(HarmonicFeatures, Kernel)
def _kuf_harmonic(feature, kernel, X):
    feature.check_kernel(kernel)
    K = feature.orbit_gram(kernel, X)
    W = jnp.asarray(feature.group.weights(), dtype=K.dtype)
    if feature.Z.ndim == 2:  # [K_t,uf]_in = Σ_s W_ts k(G^s z_i, x_n) (notes §1 [1])
        Kt = jnp.einsum("ts,smn->tmn", W, K)
    else:
        Kt = jnp.einsum("ts,stmn->tmn", W, K)
    return Kt.reshape(-1, X.shape[0])


