"""Data loaders: small data sets bundled with the package, larger ones from a data directory.

Bundled (``ppl_sparsegp/datasets/data/``, copies of ``../shared/data/vff/``), always available:

* :func:`load_solar`: solar irradiance reconstruction (Lean 2004), the VFF paper's §6.4 [1];
* :func:`load_pines`: Finnish pines sapling locations in [0, 1]², the VFF paper's §6.5 [1];
* :func:`load_banana`: the banana binary classification set, the VFF paper's §6.3 [1].

From the data directory (:func:`data_dir`: the environment variable ``PPL_SPARSEGP_DATA``, else
``../shared/data`` next to the repository checkout):

* :func:`load_uci`: the standard UCI regression benchmarks with their fixed train/test splits
  (``uci/<name>/``);
* :func:`load_srf`: the four UCI sets as the Stein random features paper used them (``srf/<name>.csv``).

Loaders return NumPy float64 arrays exactly as stored; :func:`standardise` scales a split with its
training statistics only (the models call it). Nothing is ever downloaded.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
"""
from __future__ import annotations

import difflib
import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import numpy as np

from ..validation import ArrayOf, Flag, InstanceOf, NonNegativeInt, OneOf, OrNone, validated

__all__ = ["ENV_VAR", "SolarData", "UCISplit", "load_solar", "load_pines", "load_banana", "data_dir",
           "uci_names", "srf_names", "load_uci", "load_srf", "Standardised", "standardise"]

ENV_VAR = "PPL_SPARSEGP_DATA"

#: a data directory argument: None (the default resolution of :func:`data_dir`) or a path
_ROOT = OrNone(InstanceOf(str, os.PathLike, what="a folder (a str or an os.PathLike)"))
_NAME = InstanceOf(str, what="a data set name (a string)")


# --- bundled ----------------------------------------------------------------------------------------
def _bundled(name: str):
    return resources.files(__name__).joinpath("data", name)


def _read_bundled(name: str, **kwargs) -> np.ndarray:
    with _bundled(name).open("r") as fh:
        return np.loadtxt(fh, ndmin=2, **kwargs)


class SolarData(NamedTuple):
    """Columns of ``solar_data.txt``: year (mid-year, 1610.5–2000.5), the 11-year cycle and the
    11-year cycle plus background (the VFF paper models the last), in W/m²."""

    year: np.ndarray
    cycle: np.ndarray
    cycle_background: np.ndarray


def load_solar() -> SolarData:
    """Solar irradiance reconstruction (Lean 2004): 391 yearly values, three columns (see
    :class:`SolarData`)."""
    a = _read_bundled("solar_data.txt", delimiter=",", comments="#")
    return SolarData(a[:, 0], a[:, 1], a[:, 2])


def load_pines() -> np.ndarray:
    """Finnish pines sapling locations in [0, 1]², shape (127, 2), as published: the first row is
    repeated (126 distinct trees)."""
    return _read_bundled("pines.csv", delimiter=",")


def load_banana() -> tuple[np.ndarray, np.ndarray]:
    """The banana classification set: inputs (400, 2) and labels (400,) in {0., 1.}."""
    X = _read_bundled("banana_X_train", delimiter=",")
    y = _read_bundled("banana_Y_train", delimiter=",")[:, 0]
    return X, y


# --- data directory ---------------------------------------------------------------------------------
def _default_dir() -> Path:
    """``../shared/data`` relative to the repository checkout that holds this package."""
    repo_root = Path(__file__).resolve().parents[2]
    return repo_root.parent / "shared" / "data"


@validated
def data_dir(path: Annotated[Any, _ROOT] = None) -> Path:
    """The directory of the larger data sets.

    Resolution order: ``path`` if given, else the environment variable ``PPL_SPARSEGP_DATA``, else
    ``../shared/data`` relative to the repository root.

    :param path: the folder (a str or an os.PathLike), or None.
    :returns: the folder, a ``pathlib.Path``.
    :raises FileNotFoundError: naming the directory tried and the environment variable.
    """
    if path is not None:
        where, source = Path(path), "the path argument"
    elif os.environ.get(ENV_VAR):
        where, source = Path(os.environ[ENV_VAR]), f"${ENV_VAR}"
    else:
        where, source = _default_dir(), "the default location"
    if not where.is_dir():
        raise FileNotFoundError(
            f"data directory {where} (from {source}) does not exist; set the environment variable "
            f"{ENV_VAR} to the folder holding uci/ and srf/ (see ../shared/data/README.md)")
    return where


def _names(folder: Path, suffix: str = "") -> list:
    if not folder.is_dir():
        return []
    return sorted(p.name[: len(p.name) - len(suffix)] if suffix else p.name
                  for p in folder.iterdir() if (p.is_file() if suffix else p.is_dir())
                  and p.name.endswith(suffix))


@validated
def uci_names(root: Annotated[Any, _ROOT] = None) -> list:
    """The UCI benchmark names available in the data directory.

    :param root: the data directory (default: :func:`data_dir`'s: ``PPL_SPARSEGP_DATA`` or ``../shared/data``).
    :returns: a sorted list of names (empty without a ``uci/`` folder).
    :raises FileNotFoundError: when the data directory does not exist."""
    return _names(data_dir(root) / "uci")


@validated
def srf_names(root: Annotated[Any, _ROOT] = None) -> list:
    """The SRF data set names available in the data directory.

    :param root: the data directory (default: :func:`data_dir`'s).
    :returns: a sorted list of names (empty without an ``srf/`` folder).
    :raises FileNotFoundError: when the data directory does not exist."""
    return _names(data_dir(root) / "srf", ".csv")


class UCISplit(NamedTuple):
    """One fixed train/test split of a UCI regression set (raw values, targets as vectors)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def _read_index(path: Path) -> np.ndarray:
    return np.atleast_1d(np.loadtxt(path, dtype=np.int64))


@validated
def load_uci(name: Annotated[str, _NAME], split: Annotated[int, NonNegativeInt()] = 0, *,
             root: Annotated[Any, _ROOT] = None) -> UCISplit:
    """A UCI regression benchmark with its ``split``-th fixed train/test split.

    Reads ``uci/<name>/data.txt`` (whitespace separated), the feature and target columns from
    ``index_features.txt`` / ``index_target.txt`` and the rows from ``index_train_<split>.txt`` /
    ``index_test_<split>.txt`` (``n_splits.txt`` says how many splits exist).

    :param name: e.g. ``"concrete"``, ``"energy"``, ``"kin8nm"``, ``"yacht"`` (see :func:`uci_names`).
    :param split: split number in ``0 .. n_splits - 1``.
    :param root: data directory (default :func:`data_dir`).
    :returns: a :class:`UCISplit` ``(X_train, y_train, X_test, y_test)``.
    :raises ValueError: for a name with no ``uci/<name>/`` folder (the message names the closest one and
        lists the available ones) or a split outside ``0 .. n_splits - 1``.
    :raises FileNotFoundError: when the data directory does not exist.
    """
    folder = data_dir(root) / "uci" / name
    if not folder.is_dir():
        raise ValueError(_unknown("UCI", name, uci_names(root)))
    n_splits = int(np.loadtxt(folder / "n_splits.txt"))
    if not split < n_splits:
        raise ValueError(f"split must be an integer in 0..{n_splits - 1} for {name!r}, got {split!r}")
    data = np.loadtxt(folder / "data.txt", ndmin=2)
    features = _read_index(folder / "index_features.txt")
    target = int(_read_index(folder / "index_target.txt")[0])
    train = _read_index(folder / f"index_train_{split}.txt")
    test = _read_index(folder / f"index_test_{split}.txt")
    X, y = data[:, features], data[:, target]
    return UCISplit(X[train], y[train], X[test], y[test])


def _unknown(kind: str, name: str, names: list) -> str:
    """The message for an unknown data set name: the closest valid one, then every one."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown {kind} data set {name!r}; {hint}available: {', '.join(names) or 'none (empty folder)'}"


# SRF sets whose target is not simply the last column: name -> (target column, dropped columns)
_SRF_TARGETS = {"energy": ("heating_load", ("cooling_load",))}


@validated
def load_srf(name: Annotated[str, _NAME], *, root: Annotated[Any, _ROOT] = None, return_names: Flag = False):
    """A UCI set as used by the Stein random features paper (``srf/<name>.csv``, header row).

    The target is the last column, except for ``energy``: ``heating_load``, with ``cooling_load``
    dropped.

    :param name: ``"airfoil"``, ``"concrete"``, ``"energy"`` or ``"wine"`` (see :func:`srf_names`).
    :param root: the data directory holding ``srf/`` (default: :func:`data_dir`'s: ``PPL_SPARSEGP_DATA`` or
        ``../shared/data``).
    :param return_names: also return the feature names and the target name.
    :returns: ``(X, y)``: float64 inputs (N, D) and targets (N,), as stored (or ``(X, y, feature_names,
        target_name)``, the names from the header row: a list of D strings and a string).
    :raises FileNotFoundError: when the data directory does not exist.
    :raises ValueError: for a name with no ``srf/<name>.csv`` (the message lists the available ones).
    """
    path = data_dir(root) / "srf" / f"{name}.csv"
    if not path.is_file():
        raise ValueError(_unknown("SRF", name, srf_names(root)))
    with open(path) as fh:
        header = fh.readline().strip().split(",")
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    target, dropped = _SRF_TARGETS.get(name, (header[-1], ()))
    t = header.index(target)
    keep = [i for i, h in enumerate(header) if i != t and h not in dropped]
    X, y = data[:, keep], data[:, t]
    if return_names:
        return X, y, [header[i] for i in keep], target
    return X, y


# --- scaling ----------------------------------------------------------------------------------------
_MATRIX = Annotated[Any, ArrayOf(rank=2)]
_VECTOR = Annotated[Any, ArrayOf(rank=1)]


def _same_size(a: str, m: int, b: str, n: int, what: str):
    if m != n:
        raise ValueError(f"standardise: {a} and {b} must have the same number of {what}, got {m} and {n}")

class Standardised(NamedTuple):
    """A split scaled by :func:`standardise`; ``y_test`` is None when none was given. ``scaler`` holds
    ``x_shift``, ``x_scale`` (D,) and the floats ``y_mean``, ``y_sd``: a prediction with mean m and
    variance v in the scaled units is m·y_sd + y_mean and v·y_sd² in the original ones."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray | None
    scaler: dict


@validated
def standardise(X_train: _MATRIX, y_train: _VECTOR, X_test: _MATRIX,
                y_test: Annotated[Any, OrNone(ArrayOf(rank=1))] = None, *,
                x_scaling: Annotated[str, OneOf("standard", "minmax")] = "standard") -> Standardised:
    """Scale inputs and targets with the *training* statistics only (applied unchanged to the test set).

    :param X_train: training inputs (N, D); ``y_train``: training targets (N,).
    :param X_test: test inputs (N*, D); ``y_test``: test targets (N*,) or None.
    :param x_scaling: ``"standard"``: (X − mean) / sd per column; ``"minmax"``: (X − min) / (max − min),
        training inputs in [0, 1]. A constant column gets scale 1. Targets: (y − mean) / sd.
    :returns: :class:`Standardised` ``(X_train, y_train, X_test, y_test, scaler)``.
    :raises ValueError: for arrays of other ranks, non-finite values, or rows or columns that do not match
        (the message names the two arrays).
    """
    X_train, y_train, X_test = np.asarray(X_train), np.asarray(y_train), np.asarray(X_test)
    _same_size("X_train", X_train.shape[0], "y_train", y_train.shape[0], "rows")
    _same_size("X_train", X_train.shape[1], "X_test", X_test.shape[1], "columns")
    if y_test is not None:
        _same_size("X_test", X_test.shape[0], "y_test", np.shape(y_test)[0], "rows")
    if X_train.shape[0] < 2:
        raise ValueError(f"standardise: X_train needs at least 2 rows to scale by, got {X_train.shape[0]}")
    if x_scaling == "standard":
        shift, scale = X_train.mean(0), X_train.std(0)
    elif x_scaling == "minmax":
        shift, scale = X_train.min(0), X_train.max(0) - X_train.min(0)
    else:
        raise ValueError(f"x_scaling must be 'standard' or 'minmax', got {x_scaling!r}")
    scale = np.where(scale > 0, scale, 1.0)
    y_mean, y_sd = y_train.mean(), y_train.std()
    if not y_sd > 0:
        raise ValueError("standardise: y_train is constant (sd 0): the targets cannot be scaled; check the data")
    scaled_test = None if y_test is None else (np.asarray(y_test) - y_mean) / y_sd
    return Standardised((X_train - shift) / scale, (y_train - y_mean) / y_sd, (X_test - shift) / scale, scaled_test,
                        {"x_shift": shift, "x_scale": scale, "y_mean": float(y_mean), "y_sd": float(y_sd)})
