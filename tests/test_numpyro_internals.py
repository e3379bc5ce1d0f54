"""ppl_sparsegp.numpyro_internals: the private-API wrappers do what their public stand-ins would."""
import jax
import numpy as np

from ppl_sparsegp import numpyro_internals


def test_host_device_count_is_fixed_once_jax_has_started():
    jax.numpy.zeros(1).block_until_ready()  # backends start
    assert numpyro_internals.backends_initialised()
    before = jax.local_device_count()
    assert numpyro_internals.set_host_device_count(7) is False and jax.local_device_count() == before


def test_subsample_indices_are_a_uniform_draw_without_replacement():
    idx = np.asarray(numpyro_internals.subsample_indices(50, 10, jax.random.PRNGKey(0)))
    assert idx.shape == (10,) and len(np.unique(idx)) == 10 and idx.min() >= 0 and idx.max() < 50
    draws = jax.jit(jax.vmap(lambda key: numpyro_internals.subsample_indices(50, 10, key)))(
        jax.random.split(jax.random.PRNGKey(1), 200))
    counts = np.bincount(np.asarray(draws).ravel(), minlength=50)
    # each index appears with probability 10/50: 40 ± 6.3 times in 200 draws; 5 sd
    assert np.all(np.abs(counts - 40) < 5 * np.sqrt(200 * 0.2 * 0.8))
