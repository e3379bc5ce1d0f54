"""float32 limits: :class:`Float32Warning`, the check each family calls past its measured float32 limit
(:func:`warn_float32`), and the GPU matmul-precision check that every ``Kuu`` runs once per trace
(:func:`warn_float32_gpu_matmul`, registered in :data:`~ppl_sparsegp.covariances.Kuu`'s ``checks`` here,
on import: ``features/__init__.py`` imports this module)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from ..covariances import Kuu
from ..linalg import LinearOperator
from ..validation import warn_user

__all__ = ["Float32Warning", "warn_float32", "warn_float32_gpu_matmul"]


class Float32Warning(UserWarning):
    """A float32 computation past the limit where it was measured to hold against float64 (the README's
    float32 table, ``inference/benchmarks/float32.py``): the result is finite but off."""


def warn_float32(dtype: DTypeLike, limited: bool, message: str):
    """Warn (:class:`Float32Warning`) when ``dtype`` is float32 and the family is past its measured limit
    (``limited``); ``message`` names the limit, what was measured beyond it and the fix. At trace time
    under jit the warning is raised once per compilation."""
    if limited and jnp.dtype(dtype) == jnp.float32:
        warn_user(message + "; use float64 (jax_enable_x64 with float64 inputs and hyperparameters)",
                  Float32Warning)


# matmul precisions that keep float32's 24-bit mantissa on an NVIDIA GPU (JAX's default there may use TF32)
_FULL_FLOAT32_PRECISIONS = ("highest", "float32", "tensorfloat32x3", "float32x3")


def warn_float32_gpu_matmul(Kmm: LinearOperator):
    """Warn (:class:`Float32Warning`, by :func:`warn_float32`) when ``Kmm`` (a LinearOperator, the result
    of :data:`~ppl_sparsegp.covariances.Kuu`, which runs this check once per trace) is float32, JAX's
    default backend is a GPU and the default matmul precision is not "highest": there XLA may compute
    float32 products in TF32 (a 10-bit mantissa). Measured on an NVIDIA H200 (``inference/benchmarks/gpu.py``,
    2026-11-27): 7 of 13 float32 settings broke (relative errors up to 0.79 for spherical harmonic features;
    failed Cholesky factors for the harmonic features), and all but one held again under "highest"."""
    tf32 = (jax.default_backend() == "gpu"
            and str(jax.config.jax_default_matmul_precision).lower() not in _FULL_FLOAT32_PRECISIONS)
    warn_float32(Kmm.dtype, tf32, "float32 on a GPU with JAX's default matmul precision, which may use TF32 "
                 "products (a 10-bit mantissa): measured relative errors up to 0.79 and failed Cholesky "
                 "factors; set jax.config.update('jax_default_matmul_precision', 'highest')")


Kuu.checks.append(warn_float32_gpu_matmul)
