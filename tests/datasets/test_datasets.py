"""Dataset loaders: bundled copies identical to ../shared/data, values as published, clear errors."""
import filecmp
from pathlib import Path

import numpy as np
import pytest

from ppl_sparsegp import datasets

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")


@needs_shared
@pytest.mark.parametrize("name", ["solar_data.txt", "pines.csv", "banana_X_train", "banana_Y_train"])
def test_bundled_copies_identical(name):
    bundled = Path(str(datasets._bundled(name)))
    assert filecmp.cmp(bundled, SHARED / "vff" / name, shallow=False)


def test_solar_values():
    d = datasets.load_solar()
    assert d.year.shape == d.cycle.shape == d.cycle_background.shape == (391,)
    # first and last data rows of solar_data.txt
    np.testing.assert_array_equal([d.year[0], d.cycle[0], d.cycle_background[0]],
                                  [1610.5, 1365.8477, 1364.7338])
    np.testing.assert_array_equal([d.year[-1], d.cycle[-1], d.cycle_background[-1]],
                                  [2000.5, 1366.6620, 1366.6744])
    np.testing.assert_array_equal(np.diff(d.year), 1.0)  # one value per year, no gaps


def test_pines_values():
    P = datasets.load_pines()
    assert P.shape == (127, 2)
    np.testing.assert_array_equal(P[0], [3.003617891200475176e-01, 8.933876832753234742e-01])
    np.testing.assert_array_equal(P[0], P[1])  # the published file repeats its first tree
    assert len(np.unique(P, axis=0)) == 126
    assert P.min() >= 0.0 and P.max() <= 1.0


def test_banana_values():
    X, y = datasets.load_banana()
    assert X.shape == (400, 2) and y.shape == (400,)
    np.testing.assert_array_equal(X[0], [6.589057299999999673e-01, -9.850710900000000381e-01])
    np.testing.assert_array_equal(y[:3], [1.0, 0.0, 1.0])
    assert set(np.unique(y)) == {0.0, 1.0}


@needs_shared
def test_uci_split_matches_files():
    s = datasets.load_uci("concrete", 0, root=SHARED)
    folder = SHARED / "uci" / "concrete"
    data = np.loadtxt(folder / "data.txt")
    train = np.loadtxt(folder / "index_train_0.txt", dtype=int)
    test = np.loadtxt(folder / "index_test_0.txt", dtype=int)
    assert s.X_train.shape == (len(train), 8) and s.X_test.shape == (len(test), 8)
    assert len(train) + len(test) == 1030 and not set(train) & set(test)
    # test index 0 of split 0 is row 87; concrete's first row is "540 0 0 162 2.5 1040 676 28 79.99"
    np.testing.assert_array_equal(s.X_test[0], data[87, :8])
    np.testing.assert_array_equal(s.y_test[0], data[87, 8])
    np.testing.assert_array_equal(data[0], [540.0, 0.0, 0.0, 162.0, 2.5, 1040.0, 676.0, 28, 79.99])
    np.testing.assert_array_equal(s.y_train, data[train, 8])


@needs_shared
def test_srf_energy_target_and_dropped_column():
    X, y, names, target = datasets.load_srf("energy", root=SHARED, return_names=True)
    assert X.shape == (768, 16) and target == "heating_load" and "cooling_load" not in names
    np.testing.assert_array_equal(y[:2], [15.55, 15.55])  # heating_load, not cooling_load (21.33)
    X, y = datasets.load_srf("airfoil", root=SHARED)
    assert X.shape == (1503, 5)
    np.testing.assert_array_equal(X[0], [800, 0.0, 0.3048, 71.3, 0.00266337])
    np.testing.assert_array_equal(y[0], 126.201)


@needs_shared
def test_data_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)
    assert datasets.data_dir().resolve() == SHARED.resolve()  # default: ../shared/data
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path))
    assert datasets.data_dir() == tmp_path


def test_missing_dir_error(monkeypatch, tmp_path):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv(datasets.ENV_VAR, str(missing))
    with pytest.raises(FileNotFoundError, match=r"nowhere.*PPL_SPARSEGP_DATA"):
        datasets.load_uci("concrete")
    with pytest.raises(FileNotFoundError, match="PPL_SPARSEGP_DATA"):
        datasets.load_srf("wine")


@needs_shared
def test_unknown_name_and_split_errors():
    with pytest.raises(ValueError, match=r"unknown UCI data set 'nope'.*concrete"):
        datasets.load_uci("nope", root=SHARED)
    with pytest.raises(ValueError, match=r"unknown SRF data set 'nope'.*airfoil"):
        datasets.load_srf("nope", root=SHARED)
    with pytest.raises(ValueError, match=r"split must be an integer in 0\.\.4"):
        datasets.load_uci("protein-tertiary-structure", 5, root=SHARED)


@needs_shared
def test_a_misspelt_name_is_refused_with_the_closest_one():
    """An unknown name names the closest valid one (issue 49: unknown options refused by name)."""
    with pytest.raises(ValueError, match=r"unknown UCI data set 'concret'; did you mean 'concrete'\?"):
        datasets.load_uci("concret", root=SHARED)
    with pytest.raises(ValueError, match=r"unknown SRF data set 'airfol'; did you mean 'airfoil'\?"):
        datasets.load_srf("airfol", root=SHARED)


def test_standardise_refuses_arrays_that_do_not_match():
    X, y = np.arange(12.0).reshape(6, 2), np.arange(6.0)
    with pytest.raises(ValueError, match="X_train and y_train must have the same number of rows, got 6 and 5"):
        datasets.standardise(X, y[:5], X)
    with pytest.raises(ValueError, match="X_train and X_test must have the same number of columns, got 2 and 1"):
        datasets.standardise(X, y, X[:, :1])
    with pytest.raises(ValueError, match="y_train is constant"):
        datasets.standardise(X, np.ones(6), X)
    with pytest.raises(ValueError, match="x_scaling must be one of 'standard', 'minmax'.*did you mean 'minmax'"):
        datasets.standardise(X, y, X, x_scaling="minmx")
