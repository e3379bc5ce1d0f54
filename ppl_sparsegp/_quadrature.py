r"""The library's one Gauss–Hermite rule: Gaussian expectations :math:`\mathbb E_{\mathcal N(f\mid m, v)}[g(f)]`
elementwise, and their logs computed in log space.

The likelihoods (:mod:`ppl_sparsegp.likelihoods`) use it wherever a variational expectation or a predictive
density has no closed form. It is internal (not part of the curated surface): the likelihoods' methods are the
public way to it, and its callers pass values already judged (and usually traced), so it declares nothing;
``ppl_sparsegp.likelihoods`` imports it but no longer lists it in ``__all__``.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

__all__ = ["gauss_hermite", "log_gauss_hermite"]


@functools.lru_cache(maxsize=None)
def _hermgauss(num_points: int):
    """Nodes x_i, weights w_i/√π and log(w_i/√π) of the n-point physicists' Hermite rule (float64)."""
    if not isinstance(num_points, (int, np.integer)) or num_points < 1:
        raise ValueError(f"num_points must be a positive integer, got {num_points!r}")
    x, w = np.polynomial.hermite.hermgauss(int(num_points))
    w = w / np.sqrt(np.pi)
    for a in (x, w):
        a.setflags(write=False)
    logw = np.log(w)
    logw.setflags(write=False)
    return x, w, logw


def _float_dtype(*xs):
    dt = jnp.result_type(*xs)
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return dt


def _gh_nodes(mean, var, num_points):
    dtype = _float_dtype(mean, var)
    mean, var = jnp.broadcast_arrays(jnp.asarray(mean, dtype), jnp.asarray(var, dtype))
    x, w, logw = _hermgauss(num_points)
    x = jnp.asarray(x, dtype).reshape((-1,) + (1,) * mean.ndim)
    f = mean + jnp.sqrt(2.0 * var) * x  # f_i = m + √(2v) x_i
    return f, jnp.asarray(w, dtype), jnp.asarray(logw, dtype)


def gauss_hermite(fn, mean, var, num_points: int = 20):
    r"""Gauss–Hermite estimate of :math:`\mathbb E_{\mathcal N(f\mid m, v)}[g(f)]`, elementwise.

    .. math:: \mathbb E[g(f)] \approx \sum_{i=1}^{n} \frac{w_i}{\sqrt\pi}\, g\big(m + \sqrt{2v}\,x_i\big)

    with :math:`(x_i, w_i)` the ``numpy.polynomial.hermite.hermgauss`` rule (cached per ``n``, cast to
    the dtype of ``mean``/``var``). Exact for polynomials :math:`g` of degree :math:`\le 2n-1`.
    This is the only Gauss–Hermite rule of the library.

    :param fn: ``g``; receives ``f`` of shape ``(num_points, *batch)``, ``batch`` the broadcast shape
        of ``mean`` and ``var``, and returns the same shape.
    :param mean: :math:`m`, array.
    :param var: :math:`v \ge 0`, array broadcastable with ``mean``.
    :param num_points: :math:`n`.
    :returns: array of shape ``batch``.
    """
    f, w, _ = _gh_nodes(mean, var, num_points)
    return jnp.tensordot(w, fn(f), axes=1)


def log_gauss_hermite(log_fn, mean, var, num_points: int = 20):
    r"""Log of :func:`gauss_hermite` applied to :math:`\exp(\ell(f))`, computed stably in log space.

    .. math:: \log \mathbb E[e^{\ell(f)}] \approx \operatorname{logsumexp}_i
              \Big(\log\frac{w_i}{\sqrt\pi} + \ell\big(m + \sqrt{2v}\,x_i\big)\Big)

    Same nodes as :func:`gauss_hermite`; ``log_fn`` follows the same shape convention.

    :param log_fn: :math:`\ell`; receives ``f`` of shape ``(num_points, *batch)``, ``batch`` the broadcast
        shape of ``mean`` and ``var``, and returns ``(num_points, *batch)`` (or with further trailing axes).
    :param mean: :math:`m`, array.
    :param var: :math:`v \ge 0`, array broadcastable with ``mean``.
    :param num_points: :math:`n`, the number of Gauss–Hermite nodes (default 20).
    :returns: array of the shape ``log_fn`` returns without its leading node axis (``batch``).
    """
    f, _, logw = _gh_nodes(mean, var, num_points)
    vals = log_fn(f)
    logw = logw.reshape((-1,) + (1,) * (vals.ndim - 1))
    return logsumexp(logw + vals, axis=0)
