r"""Flip-digits: multiclass GP classification of randomly flipped 8×8 digits with flip-group harmonic features.

The paper's Flip-MNIST [1, §4.2, Fig. 2] at a size this machine handles: scikit-learn's ``load_digits``
(1797 images of 8×8 pixels, 10 classes, no download), each image flipped up–down with probability ½ and,
independently, left–right with probability ½, so the input distribution is invariant under the 2-way flip
group (the condition of Thm 4.2). Pixels are scaled to [−0.5, 0.5] (a scalar shift keeps the flip
symmetry); a fixed seeded split gives 1200 training and 597 test images.

Model: :class:`~ppl_sparsegp.SparseGP` (10 latent GPs sharing an isotropic
squared-exponential kernel) with a softmax likelihood (``--likelihood robustmax``: the robust-max
likelihood of the paper's CIFAR experiments [1, §6.4]; the paper does not name Flip-MNIST's) and
(``--features``)

* ``flip`` (default): harmonic features of the 2-way flip group (up–down × left–right), 4 sub-kernels ×
  m inducing images, block-diagonal q(u) — the paper's "FLIP 4×m";
* ``neg``: harmonic features of a group that does *not* match the data, 2-way negation of the two halves
  of the pixels (even / odd pixel index, as the authors' code splits dimensions), the paper's control
  "NEG 4×m";
* ``inducing``: SVGP with M = ``--num-features`` inducing images.

Inducing inputs are initialised at k-means centres of the training images and optimised; kernel
hyperparameters are point estimates.

References:
    1. Sun, Shi, Wilson, Grosse (2021), Scalable variational Gaussian processes via harmonic kernel
       decomposition, ICML.
"""
from __future__ import annotations

import numpy as np
from numpyro.distributions import constraints

from models import ModelSpec
from models._arguments import count, non_negative_int
from ppl_sparsegp import InducingPoints, Param, SparseGP, SquaredExponential
from ppl_sparsegp.approximations.variational import block_diagonal_covariance
from ppl_sparsegp.diagnostics import categorical_nlpd
from ppl_sparsegp.features.harmonic import HarmonicFeatures
from ppl_sparsegp.groups import ImageFlip, multi_negation
from ppl_sparsegp.likelihoods import RobustMax, Softmax

DESCRIPTION = "Randomly flipped 8x8 digits, 10 classes: flip-group harmonic features (4 x m) vs SVGP"

SHAPE = (8, 8)
NUM_CLASSES = 10


def add_arguments(parser):
    parser.add_argument("--features", choices=("flip", "neg", "inducing"), default="flip")
    parser.add_argument("--num-features", "-m", type=count, default=16,
                        help="m: inducing images per sub-kernel (flip/neg) or in total (inducing)")
    parser.add_argument("--likelihood", choices=("softmax", "robustmax"), default="softmax")
    parser.add_argument("--batch-size", type=count, default=256)
    parser.add_argument("--num-train", type=count, default=1200)
    parser.add_argument("--data-seed", type=non_negative_int, default=0,
                        help="seed of the flips, the split and k-means")


def load(num_train: int = 1200, seed: int = 0):
    """Flipped digits ``(X, y, X_test, y_test)``: pixels in [−0.5, 0.5], shape (N, 64), labels 0..9."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    images = digits.images / 16.0 - 0.5
    ud = rng.random(len(images)) < 0.5
    lr = rng.random(len(images)) < 0.5
    images = np.where(ud[:, None, None], images[:, ::-1, :], images)
    images = np.where(lr[:, None, None], images[:, :, ::-1], images)
    X, y = images.reshape(len(images), -1), digits.target.astype(np.int64)
    if not 0 < num_train < len(X):
        raise ValueError(f"num_train must be in 1..{len(X) - 1}, got {num_train}")
    order = rng.permutation(len(X))
    train, test = order[:num_train], order[num_train:]
    return X[train], y[train], X[test], y[test]


def flip_group():
    """Up–down × left–right flips of 8×8 images: T = T̃ = 4."""
    return ImageFlip(SHAPE, axis=0) * ImageFlip(SHAPE, axis=1)


def halves_negation_group():
    """The mismatched control: negate the even-index pixels, and separately the odd-index ones."""
    D = SHAPE[0] * SHAPE[1]
    eye = np.eye(D)
    return multi_negation([eye[:, 0::2], eye[:, 1::2]])


def make_gp(X, *, features: str = "flip", num_features: int = 16, likelihood: str = "softmax", seed: int = 0):
    """The SparseGP for images X (N, 64)."""
    from models.uci_hkd import kmeans, median_lengthscale

    positive = constraints.positive
    kernel = SquaredExponential(variance=Param(1.0, positive),
                                lengthscale=Param(median_lengthscale(X, seed), positive))
    lik = RobustMax(NUM_CLASSES) if likelihood == "robustmax" else Softmax(NUM_CLASSES)
    Z = kmeans(X, int(num_features), seed)
    if features == "inducing":
        return SparseGP(InducingPoints(Param(Z)), kernel, lik, q_cov="full")
    groups = {"flip": flip_group, "neg": halves_negation_group}
    if features not in groups:
        raise ValueError(f"features must be 'flip', 'neg' or 'inducing', got {features!r}")
    group = groups[features]()
    Z = np.broadcast_to(Z, (group.num_subkernels,) + Z.shape).copy()  # one set per sub-kernel
    return SparseGP(HarmonicFeatures(group, Param(Z)), kernel, lik, q_cov=block_diagonal_covariance)


def build(args) -> ModelSpec:
    X, y, X_test, y_test = load(args.num_train, args.data_seed)
    gp = make_gp(X, features=args.features, num_features=args.num_features, likelihood=args.likelihood,
                 seed=args.data_seed)
    label = f"4x{args.num_features}" if args.features != "inducing" else f"M={args.num_features}"
    return ModelSpec(
        name=f"digits_flip[{args.features} {label}]", gp=gp, X=X, y=y, X_test=X_test, y_test=y_test,
        model_kwargs={"batch_size": min(args.batch_size, len(X))}, methods=("svi",),
        defaults={"svi": {"num_steps": 2000, "lr": 0.01, "samples": 100}}, evaluate=evaluate)


def metrics(gp, params, X_test, y_test) -> dict:
    """Test accuracy and mean negative log predictive probability from SVI params."""
    p = np.asarray(gp.predict(X_test, params=params)["y_mean"])
    y = np.asarray(y_test)
    return {"accuracy": float(np.mean(np.argmax(p, 1) == y)), "nll": categorical_nlpd(y, p)}


def evaluate(spec, idata_or_params) -> dict:
    """Test metrics from the runner's InferenceData (its ``svi`` group) or a params dict."""
    from ppl_sparsegp.diagnostics import fitted_params

    params = fitted_params(idata_or_params, "digits_flip.evaluate")
    return metrics(spec.gp, params, spec.X_test, spec.y_test)
