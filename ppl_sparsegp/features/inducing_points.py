"""Inducing points: u = f(Z), the baseline of every comparison (Titsias 2009)."""
from __future__ import annotations

from typing import Annotated, Any, Callable, Optional, Union

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ..covariances import Kuf, Kuu
from ..kernels import Kernel, check_inputs
from ..linalg import Dense
from ..parameters import Param, is_concrete
from ..validation import AnyOf, ArrayOf, InstanceOf, OrNone, Real, validated
from .base import InducingFeature
from .float32 import warn_float32

__all__ = ["InducingPoints"]

class InducingPoints(InducingFeature):
    r"""Inducing variables :math:`u_m = f(\mathbf z_m)`.

    :math:`K_{uu} = k(Z, Z) + \epsilon\sigma_k^2 I` (a :class:`~ppl_sparsegp.linalg.Dense` operator) and
    :math:`K_{uf} = k(Z, X)`.

    :param Z: inducing inputs, shape (M, D): an array (fixed) or a :class:`~ppl_sparsegp.Param`
        (optimised by SVI).
    :param jitter: relative jitter ε added to the diagonal of Kuu (default 1e-10 in float64, 1e-5 in
        float32).
    """

    _params = ("Z",)
    _static = ("jitter",)

    @validated
    def __init__(self, Z: Annotated[Any, AnyOf(ArrayOf(rank=2, traced=False), InstanceOf(Param, what="a Param"))],
                 jitter: Annotated[Any, OrNone(Real(0.0, None))] = None):
        if isinstance(Z, Param):
            check_inputs(Z.init, "Z")
        elif is_concrete(Z):
            Z = check_inputs(jnp.asarray(Z, dtype=jnp.result_type(float)), "Z")
        if jitter is not None and not (np.isfinite(jitter) and jitter >= 0):
            raise ValueError(f"jitter must be a non-negative number, got {jitter!r}")
        if np.shape(Z.init if isinstance(Z, Param) else Z)[0] == 0:
            raise ValueError("Z has no rows: give at least one inducing input, shape (M, D) with M >= 1")
        self._set(Z=Z, jitter=jitter)

    def adequacy_advice(self, lengthscales: Optional[ArrayLike], X: ArrayLike,
                        kernel: Union[Kernel, Callable[[Any], Kernel]], tolerance: float) -> str:
        """More inducing points, or better placed (:meth:`~ppl_sparsegp.features.InducingFeature.adequacy_advice`)."""
        return "add inducing points (or place them where the data are)"

    @property
    def inducing_inputs(self):
        """The inducing inputs Z, of shape (M, D), where the inducing variables are the values of f
        (:attr:`~ppl_sparsegp.features.InducingFeature.inducing_inputs`)."""
        return self.Z

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        X = check_inputs(X, name)
        D = np.shape(self.Z.init if isinstance(self.Z, Param) else self.Z)[1]
        if X.shape[1] != D:
            raise ValueError(f"{name} has {X.shape[1]} input dimensions but the inducing inputs Z have {D}: "
                             f"give Z of shape (M, {X.shape[1]})")
        return X

    @property
    def num_features(self):
        Z = self.Z.init if isinstance(self.Z, Param) else self.Z
        return Z.shape[0]

    def relative_jitter(self, dtype: DTypeLike):
        if self.jitter is not None:
            return self.jitter
        return 1e-10 if jnp.finfo(dtype).bits == 64 else 1e-5


@Kuu.register(InducingPoints, Kernel)
def _kuu_inducing_points(feature, kernel):
    K = kernel(feature.Z)
    M = K.shape[0]
    warn_float32(K.dtype, M > 100, f"InducingPoints in float32 with M = {M} > 100: measured against float64, "
                 "the SVGP ELBO drifts silently past M = 100 (1.2e-2 relative at M = 300, ℓ = 1) and the Cholesky "
                 "of Kuu fails from M = 300 (ℓ = 0.05) to 1000")
    eps = feature.relative_jitter(K.dtype) * jnp.mean(kernel.diag(feature.Z))
    return Dense(K, jitter=eps)


@Kuf.register(InducingPoints, Kernel)
def _kuf_inducing_points(feature, kernel, X):
    return kernel(feature.Z, X)
