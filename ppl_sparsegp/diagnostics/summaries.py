r"""Summaries (R-hat, ESS [1]) and InferenceData files (netCDF).

References:
    1. Vehtari, Gelman, Simpson, Carpenter, Bürkner (2021), Rank-normalization, folding, and
       localization: an improved R-hat for assessing convergence of MCMC.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from typing import Annotated, Any

from ..validation import InstanceOf, Names, OrNone, Path, validated
from ._arviz import _quiet_arviz, az

_IDATA = InstanceOf("arviz.InferenceData", what="an arviz.InferenceData")

__all__ = ["summary", "save", "load"]


@validated
def summary(idata: Annotated[Any, _IDATA], var_names: Annotated[Any, OrNone(Names())] = None, **kwargs):
    """``az.summary``: mean, sd, HDI, MCSE, ESS (bulk, tail) and rank-normalised split R-hat [1].

    :param idata: an InferenceData.
    :param var_names: variables to summarise (default: every posterior variable).
    :param kwargs: passed on to ``az.summary``.
    :returns: a pandas DataFrame (columns include ``r_hat``, ``ess_bulk``, ``ess_tail``).
    """
    quiet = idata.posterior.attrs.get("inference") == "svi"  # one chain of guide draws, by design
    with warnings.catch_warnings(), (_quiet_arviz() if quiet else contextlib.nullcontext()):
        warnings.simplefilter("ignore", RuntimeWarning)  # R-hat of constant draws (point estimates)
        warnings.simplefilter("ignore", UserWarning)
        return az.summary(idata, var_names=var_names, **kwargs)


@validated
def save(idata: Annotated[Any, _IDATA], path: Path) -> str:
    """Write ``idata`` (all groups, the ``svi`` and ``adequacy`` groups included) to a netCDF file.

    :param idata: an InferenceData.
    :param path: the file to write (its folder is created).
    :returns: the path."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return idata.to_netcdf(path)


@validated
def load(path: Path) -> az.InferenceData:
    """Read an InferenceData written by :func:`save`, into memory (the file is closed afterwards).

    :param path: the netCDF file.
    :returns: an :class:`arviz.InferenceData`.
    :raises FileNotFoundError: when there is no file at ``path``."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no InferenceData file at {path}")
    with warnings.catch_warnings(), az.rc_context({"data.load": "eager"}):
        warnings.simplefilter("ignore", UserWarning)
        return az.from_netcdf(path)
