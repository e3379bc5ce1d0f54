"""Predictive metrics from predictive means and variances (NumPy in, floats out).

Targets standardised by a training sd s (``y_scale``) are reported in the original units: RMSE × s,
NLPD + log s per point.
"""
from __future__ import annotations

import math
from typing import Annotated, Any

import numpy as np
from jax.scipy.special import logsumexp

from ..validation import ArrayOf, Flag, Positive, validated

#: arrays of finite numbers (targets, predictive moments)
Values = Annotated[Any, ArrayOf()]

__all__ = ["rmse", "nlpd", "mixture_nlpd", "mixture_metrics", "categorical_nlpd"]


@validated
def rmse(y: Values, mean: Values, *, y_scale: Positive = 1.0) -> float:
    r"""Root mean squared error :math:`s\sqrt{\frac1N\sum_n (y_n - m_n)^2}`.

    :param y: targets (N,); ``mean``: predictive means (N,), on the same (standardised) scale.
    :param y_scale: s, the training sd the targets were divided by (1: none).
    :returns: a float in the original units."""
    y, mean = np.asarray(y), np.asarray(mean)
    return float(np.sqrt(np.mean((y - mean) ** 2))) * y_scale


@validated
def nlpd(y: Values, mean: Values, var: Values, *, y_scale: Positive = 1.0) -> float:
    r"""Mean negative log density of Gaussian predictives,
    :math:`\frac1N\sum_n \tfrac12\big(\log 2\pi v_n + (y_n - m_n)^2/v_n\big) + \log s`.

    :param y: targets (N,); ``mean``, ``var``: predictive means and variances (N,).
    :param y_scale: s, the training sd the targets were divided by (1: none).
    :returns: a float (nats per point, original units)."""
    y, mean, var = np.asarray(y), np.asarray(mean), np.asarray(var)
    return float(np.mean(0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var))) + math.log(y_scale)


@validated
def mixture_nlpd(y: Values, mean_draws: Values, var_draws: Values, *, y_scale: Positive = 1.0,
                 joint: Flag = False) -> float:
    r"""NLPD of an equally weighted mixture of S Gaussian predictives (``mean_draws``, ``var_draws``: (S, N)).

    Per point (default): :math:`-\frac1N\sum_n\log\frac1S\sum_s\mathcal N(y_n\mid m_{sn}, v_{sn}) + \log s`;
    ``joint``: :math:`-\log\frac1S\sum_s\prod_n\mathcal N(y_n\mid m_{sn}, v_{sn}) + N\log s` (summed over
    the test set).

    :param y: targets (N,).
    :param y_scale: s, the training sd the targets were divided by (1: none).
    :returns: a float.
    """
    y = np.asarray(y)
    m, v = np.atleast_2d(np.asarray(mean_draws)), np.atleast_2d(np.asarray(var_draws))
    logp = -0.5 * (np.log(2 * np.pi * v) + (y - m) ** 2 / v)  # (S, N)
    S, N = logp.shape
    if joint:
        return float(-(logsumexp(np.sum(logp, 1)) - math.log(S))) + N * math.log(y_scale)
    return float(-np.mean(logsumexp(logp, axis=0) - math.log(S))) + math.log(y_scale)


@validated
def mixture_metrics(y: Values, mean_draws: Values, var_draws: Values, *, y_scale: Positive = 1.0) -> dict:
    r"""Test metrics of an equally weighted mixture of M Gaussian predictives (M-SRFR's particles, or
    posterior draws): ``mean_draws``, ``var_draws`` (M, N) per-component y predictives of standardised
    targets ``y``; ``y_scale``: the training sd s (for the RMSE in original units).

    :returns: ``rmse`` (of the mixture mean, original units), ``nlpd_point`` (mean over test points of
        :math:`-\log\frac1M\sum_m\mathcal N(y_i\mid\mu_{mi},\sigma^2_{mi})`), ``nlpd_joint`` (the SRF
        paper's :math:`-\log\frac1M\sum_m\prod_i\mathcal N(y_i\mid\mu_{mi},\sigma^2_{mi})`, summed over
        the test set) and ``nlpd_gaussian`` (the summed NLPD of the moment-matched Gaussian, Algorithm 2);
        the NLPDs on the standardised scale.
    """
    m, v = np.atleast_2d(np.asarray(mean_draws)), np.atleast_2d(np.asarray(var_draws))
    mu, var = m.mean(0), v.mean(0) + m.var(0)  # law of total variance
    return {"rmse": rmse(y, mu, y_scale=y_scale), "nlpd_point": mixture_nlpd(y, m, v),
            "nlpd_joint": mixture_nlpd(y, m, v, joint=True), "nlpd_gaussian": len(mu) * nlpd(y, mu, var)}


@validated
def categorical_nlpd(y: Values, probs: Values) -> float:
    r"""Mean negative log predictive probability of the labels, :math:`-\frac1N\sum_n\log p_{n,y_n}`.

    :param y: integer class labels (N,), each in ``0 .. C - 1`` (used as indices into the rows of ``probs``).
    :param probs: predictive class probabilities (N, C); clipped at 1e-300 before the log.
    :returns: a float (nats per point).
    :raises ValueError: for probs that are not (N, C) with one row per label, or labels that are not integers
        in ``0 .. C - 1``."""
    p, y = np.asarray(probs), np.asarray(y)
    if p.ndim != 2 or y.shape != (p.shape[0],):
        raise ValueError(f"probs must be (N, C) with one row per label, got probs {p.shape} and y {y.shape}")
    if not (np.issubdtype(y.dtype, np.integer) and np.all((y >= 0) & (y < p.shape[1]))):
        raise ValueError(f"y must be integer class labels in 0 .. {p.shape[1] - 1} (one per row of probs)")
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None))))
