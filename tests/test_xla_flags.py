"""The fast suite's XLA flags (tests/conftest.py) against a known miscompile.

At ``--xla_backend_optimization_level=0`` *together with* ``--xla_cpu_use_fusion_emitters=false`` (the
fast suite's flags, chosen for compile speed), jaxlib 0.10.2's CPU backend returns a wrong jitted Hessian
of the exact GP's log joint in the unconstrained coordinates: −7.9·10²⁷⁴ where eager evaluation, and the
jitted Hessian under either flag alone or at -O1, give 123.43 (measured on
``tests/approximations/test_pilot.py``'s model;
a plain hand-written Cholesky density does not show it). The library computes the pilot's Hessians eagerly
for that reason (``approximations/pilot.py``); any test that jits a second derivative of a Cholesky-based
density under the suite's flags must compare it with an eager one. This test is a strict xfail while the
miscompile lasts: when a jaxlib fixes it, the XPASS fails the suite, and the note above (and the eager
Hessians, if wanted) can go.
"""
import os

import jax
import numpy as np
import pytest

SUITE_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


@pytest.mark.skipif(not all(f in os.environ.get("XLA_FLAGS", "") for f in SUITE_FLAGS),
                    reason="only under the fast suite's -O0 and older-emitter flags")
@pytest.mark.xfail(strict=True, reason="jaxlib 0.10.2 miscompiles this jitted Hessian at -O0 with the older "
                                       "CPU emitters (the module docstring)")
def test_a_jitted_hessian_of_the_exact_marginal_equals_the_eager_one():
    import test_pilot as T

    from ppl_sparsegp.approximations import pilot_search
    from ppl_sparsegp.approximations.pilot import _sites, _trace

    sites = _sites(_trace(T.model, (T.XS, T.YS), {}))[0]
    objective, x0, _ = pilot_search.unconstrained(pilot_search.exact_model(T.model), (T.XS, T.YS), {}, sites,
                                                  {"f_kernel_lengthscale": 0.9745})
    eager = np.asarray(jax.hessian(lambda x: objective(x, True))(x0))
    jitted = np.asarray(jax.jit(jax.hessian(lambda x: objective(x, True)))(x0))
    np.testing.assert_allclose(jitted, eager, rtol=1e-6)


def test_the_shared_mlir_context_is_in_place_renews_and_changes_no_program(monkeypatch):
    """tests/mlir_context.py: this process lowers in one MLIR context per thread, renewed every RENEW
    lowerings, and a program lowered in it is the one a fresh context gives (its text, its values)."""
    import jax.numpy as jnp
    import mlir_context
    from jax._src.interpreters import mlir

    shared = mlir.make_ir_context
    assert getattr(shared, "shared_per_thread", False), "tests/conftest.py did not install it"
    monkeypatch.setattr(mlir_context, "RENEW", 3)
    contexts = [shared() for _ in range(7)]
    assert [len({id(c) for c in contexts[i:i + 3]}) for i in (0, 3)] == [1, 1]
    assert len({id(c) for c in contexts[:6]}) == 2
    with contexts[-1]:  # a lowering inside another's gets a context of its own
        assert shared() is not contexts[-1]

    weights = np.linspace(0.0, 1.0, 37)  # a constant of the program: an attribute uniqued in the context

    def program():  # a new function each time: no lowering cache between the two
        return jax.jit(lambda x: jnp.sin(x) @ weights + jnp.linalg.cholesky(jnp.outer(x, x) + jnp.eye(x.size)).sum())

    x = jnp.linspace(-1.0, 2.0, 37)
    in_shared = program().lower(x)
    monkeypatch.setattr(mlir, "make_ir_context", shared.fresh)
    in_fresh = program().lower(x)
    assert in_shared.as_text() == in_fresh.as_text()
    assert np.asarray(in_shared.compile()(x)) == np.asarray(in_fresh.compile()(x))
