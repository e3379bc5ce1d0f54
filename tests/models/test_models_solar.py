"""The solar model: the VFF §6.4 split (vff.md E6), normalisation, and the model it builds."""
import argparse

import numpy as np
import pytest

import ppl_sparsegp as psg
from models import solar
from ppl_sparsegp.datasets import load_solar


def test_split_and_normalisation():
    d = solar.load_data()
    raw = load_solar()
    years = np.concatenate([d["X"][:, 0], d["X_test"][:, 0]]) * d["x_scale"] + d["x_offset"]
    np.testing.assert_allclose(np.sort(years), raw.year, atol=1e-9)  # every year exactly once
    test_years = d["X_test"][:, 0] * d["x_scale"] + d["x_offset"]
    # 1620–50, 1700–20, 1780–1800, 1850–70, 1930–50: 30 + 4 × 20 mid-year values
    expected = np.concatenate([np.arange(lo, hi) + 0.5 for lo, hi in solar.TEST_SEGMENTS])
    np.testing.assert_allclose(np.sort(test_years), expected, atol=1e-9)
    assert len(d["y"]) == 391 - 110
    assert d["X"].min() == 0.0 and d["X"].max() == 1.0  # 1610.5 and 2000.5 are training years
    # standardised with training statistics; the third column (cycle + background) is modelled
    np.testing.assert_allclose([d["y"].mean(), d["y"].std()], [0.0, 1.0], atol=1e-12)
    first = d["y"][0] * d["y_std"] + d["y_mean"]
    np.testing.assert_allclose(first, 1364.7338, rtol=1e-12)


def test_build_spec():
    spec = solar.build(argparse.Namespace(num_features=30, features="inducing"))
    assert isinstance(spec.gp, psg.SparseGP) and spec.gp.whiten and spec.methods == ("svi", "nuts")
    Z = np.asarray(spec.gp.feature.Z)
    np.testing.assert_allclose(Z[:, 0], np.linspace(0, 1, 30))
    assert set(spec.gp.hyperparameter_sites()) == set(solar.VAR_NAMES)
    with pytest.raises(ValueError, match="--num-features must be a positive integer"):
        solar.make_feature(argparse.Namespace(num_features=0, features="inducing"), spec.X)
