r"""UCI regression with variational orthogonal features (additive) or inducing points.

Data: ``<data-dir>/uci/<dataset>/data.txt`` with ``index_features.txt``, ``index_target.txt`` and the
fixed splits ``index_train_<k>.txt`` / ``index_test_<k>.txt`` (the 20-split protocol; 5 for protein).
Inputs and targets are standardised with the training statistics only; test metrics (RMSE, NLPD) are
reported in the original units.

Features (``--features``):

* ``hermite`` (default): :class:`~ppl_sparsegp.features.orthogonal.AdditiveOrthogonal` of
  :class:`~ppl_sparsegp.features.orthogonal.HermiteFeatures`, one per input, with an additive SE kernel
  (per-input variance and lengthscale); each σ_p is learnt (initialised at 1, the standardised scale).
* ``trig``: the same with :class:`~ppl_sparsegp.features.orthogonal.TrigonometricFeatures` (learnt band,
  ``--estimator`` for the SVI objective) and an additive SE / Matérn kernel.
* ``inducing``: :class:`~ppl_sparsegp.features.InducingPoints` (learnt Z, initialised at a random subset of
  the training inputs) with an ARD SE kernel (``--ip-kernel additive`` for the additive one).

Kernel and noise hyperparameters have LogNormal priors and are point-estimated by SVI (the runner's
``--method svi``); minibatches with ``--batch-size``.

References:
    1. Burt, Rasmussen, van der Wilk (2020), Variational orthogonal features, arXiv:2006.13170.
    2. Hensman, Fusi, Lawrence (2013), Gaussian processes for big data (the SVGP baseline).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from models import ModelSpec
from models._arguments import count, non_negative_int
from ppl_sparsegp import Additive, InducingPoints, Matern32, Matern52, Param, SparseGP, SquaredExponential
from ppl_sparsegp.datasets import standardise
from ppl_sparsegp.diagnostics import nlpd, rmse
from ppl_sparsegp.features.combinations import AdditiveOrthogonal
from ppl_sparsegp.features.hermite import HermiteFeatures
from ppl_sparsegp.features.trigonometric import ESTIMATORS, TrigonometricFeatures, quadrature_nodes
from ppl_sparsegp.likelihoods import Gaussian

from .vof_regression import svi_params

DESCRIPTION = "UCI regression (fixed splits, standardised) with additive VOF (Hermite / trig) or inducing points"

DATASETS = ("concrete", "energy", "kin8nm", "naval-propulsion-plant", "power-plant",
            "protein-tertiary-structure", "wine-quality-red", "yacht")
_BASE_KERNELS = {"se": SquaredExponential, "matern32": Matern32, "matern52": Matern52}


def default_data_dir() -> Path:
    """``$PPL_SPARSEGP_DATA`` if set, else ``../shared/data`` next to the repository."""
    env = os.environ.get("PPL_SPARSEGP_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def add_arguments(parser):
    parser.add_argument("--dataset", choices=DATASETS, default="yacht")
    parser.add_argument("--split", type=non_negative_int, default=0, help="index k of index_train_<k>.txt")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder holding uci/ (default: "
                        "$PPL_SPARSEGP_DATA or ../shared/data)")
    parser.add_argument("--features", choices=("hermite", "trig", "inducing"), default="hermite")
    parser.add_argument("--num-features", type=count, default=None,
                        help="M per input for VOF (default 15), total M for inducing points (default 100)")
    parser.add_argument("--q-cov", choices=("full", "diag"), default="full")
    parser.add_argument("--base-kernel", choices=sorted(_BASE_KERNELS), default="se",
                        help="per-input kernel for trig features (Hermite needs SE)")
    parser.add_argument("--estimator", choices=ESTIMATORS, default="exact", help="Kuf for trig features")
    parser.add_argument("--num-samples", type=count, default=50, help="T of the MC estimators")
    parser.add_argument("--ip-kernel", choices=("ard", "additive"), default="ard")
    parser.add_argument("--batch-size", type=count, default=None, help="minibatch size (default: full batch "
                        "up to 2000 points, else 1000)")
    parser.add_argument("--ip-seed", type=non_negative_int, default=0, help="seed of the inducing-point initialisation")


def load_split(dataset: str, split: int, data_dir=None):
    """Raw ``(X_train, y_train, X_test, y_test)`` of one fixed split."""
    root = Path(data_dir or default_data_dir()) / "uci" / dataset
    if not (root / "data.txt").exists():
        raise FileNotFoundError(f"UCI data set {dataset!r} not found under {root}; set --data-dir or "
                                "$PPL_SPARSEGP_DATA to the folder holding uci/")
    n_splits = int(np.loadtxt(root / "n_splits.txt"))
    if not 0 <= split < n_splits:
        raise ValueError(f"split must be in 0..{n_splits - 1} for {dataset}, got {split}")
    data = np.loadtxt(root / "data.txt")
    features = np.atleast_1d(np.loadtxt(root / "index_features.txt")).astype(int)
    target = int(np.loadtxt(root / "index_target.txt"))
    train = np.atleast_1d(np.loadtxt(root / f"index_train_{split}.txt")).astype(int)
    test = np.atleast_1d(np.loadtxt(root / f"index_test_{split}.txt")).astype(int)
    X, y = data[:, features], data[:, target]
    return X[train], y[train], X[test], y[test]


def make_gp(features: str, X, *, num_features=None, q_cov="full", base_kernel="se", estimator="exact",
            num_samples=50, ip_kernel="ard", seed=0):
    """The SparseGP for standardised inputs X (N, D)."""
    D = X.shape[1]
    lik = Gaussian(variance=dist.LogNormal(math.log(0.05), 1.0))

    def per_input(cls):
        return Additive([cls(variance=dist.LogNormal(math.log(1.0 / D), 1.0),
                             lengthscale=dist.LogNormal(0.0, 1.0)) for _ in range(D)])

    _check_count(num_features, "num_features")
    if features == "inducing":
        M = min(100 if num_features is None else num_features, X.shape[0])
        Z = X[np.random.default_rng(seed).choice(X.shape[0], M, replace=False)]
        if ip_kernel == "additive":
            kernel = per_input(SquaredExponential)
        else:
            kernel = SquaredExponential(variance=dist.LogNormal(0.0, 1.0),
                                        lengthscale=dist.LogNormal(np.zeros(D), 1.0))
        return SparseGP(InducingPoints(Param(Z)), kernel, lik, q_cov=q_cov)
    M = 15 if num_features is None else num_features
    if features == "hermite":
        feats = [HermiteFeatures(M, input_scale=Param(1.0, constraints.positive)) for _ in range(D)]
        kernel = per_input(SquaredExponential)
    elif features == "trig":
        # quadrature sized for bands up to 30 over the standardised inputs (test inputs up to 1.5x further);
        # a band that outgrows it is caught by check_inputs at prediction time
        nodes = quadrature_nodes(30.0, 1.5 * float(np.max(np.abs(X))), M)
        feats = [TrigonometricFeatures(M, band=Param(5.0, constraints.positive), estimator=estimator,
                                       num_samples=num_samples, num_quadrature=nodes) for _ in range(D)]
        kernel = per_input(_BASE_KERNELS[base_kernel])
    else:
        raise ValueError(f"features must be 'hermite', 'trig' or 'inducing', got {features!r}")
    return SparseGP(AdditiveOrthogonal(feats), kernel, lik, q_cov=q_cov)


def _check_count(value, name):
    """None (the default) or a positive integer; 0 or a negative value is an error, not the default."""
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def build(args) -> ModelSpec:
    # flags first (before reading any data): 0 is an error, not a request for the default
    _check_count(args.num_features, "--num-features")
    _check_count(args.batch_size, "--batch-size")
    Xtr, ytr, Xte, yte = load_split(args.dataset, args.split, args.data_dir)
    X, y, X_test, _, scaler = standardise(Xtr, ytr, Xte)
    gp = make_gp(args.features, X, num_features=args.num_features, q_cov=args.q_cov,
                 base_kernel=args.base_kernel, estimator=args.estimator, num_samples=args.num_samples,
                 ip_kernel=args.ip_kernel, seed=args.ip_seed)
    batch = args.batch_size if args.batch_size is not None else (None if X.shape[0] <= 2000 else 1000)
    return ModelSpec(
        name=f"uci_vof[{args.dataset}/{args.features}]", gp=gp, X=X, y=y, X_test=X_test, y_test=yte,
        model_kwargs={} if batch is None else {"batch_size": batch},
        methods=("svi",), defaults={"svi": {"num_steps": 5000, "lr": 1e-2}},
        evaluate=evaluate, extra={"scaler": scaler, "y_test_raw": yte})


def evaluate(spec, result) -> dict:
    """Test RMSE and mean negative log predictive density in the original units, from SVI params (a dict,
    an ``SVIRunResult`` or the runner's InferenceData with its ``svi`` group)."""
    params = svi_params(result)
    if params is None:
        raise ValueError(f"uci_vof.evaluate needs SVI params, got {type(result).__name__}")
    pred = spec.gp.predict(spec.X_test, params=params)
    sc = spec.extra["scaler"]
    mean = np.asarray(pred["y_mean"]) * sc["y_sd"] + sc["y_mean"]
    var = np.asarray(pred["y_var"]) * sc["y_sd"] ** 2
    y = spec.extra["y_test_raw"]
    return {"rmse": rmse(y, mean), "nlpd": nlpd(y, mean, var)}
