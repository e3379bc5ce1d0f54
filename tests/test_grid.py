"""ppl_sparsegp.grid: the point order is jnp.kron's (first axis slowest), which the Kronecker paths rely on."""
import numpy as np
import pytest

import ppl_sparsegp as psg


def test_points_follow_the_kronecker_order():
    a, b = np.array([0.0, 1.0, 2.0]), np.array([10.0, 20.0])
    g = psg.Grid([a, b])
    expected = np.array([[x, y] for x in a for y in b])  # first axis slowest
    np.testing.assert_array_equal(g.points(), expected)
    assert g.shape == (6, 2) and g.ndim == 2
    # a function separable over the axes is the Kronecker product of its per-axis factors
    np.testing.assert_allclose(np.exp(-g.points()[:, 0]) * g.points()[:, 1], np.kron(np.exp(-a), b))


def test_bad_axes_and_indexing_are_refused():
    with pytest.raises(ValueError, match="non-empty"):
        psg.Grid([np.zeros((2, 2))])
    with pytest.raises(ValueError, match="NaN"):
        psg.Grid([np.array([0.0, np.nan])])
    with pytest.raises(ValueError, match="cannot be indexed"):
        psg.Grid([np.arange(3.0)])[0]
