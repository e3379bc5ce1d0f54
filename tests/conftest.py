"""Test configuration: float64 for the reference tests, two forced host devices for sharding tests, and
XLA's machine-code optimisation off."""
import os

# The fast suite is bound by compilation (thousands of small XLA programs), a third of which is LLVM
# optimising each fused kernel's machine code. The tests check values, so they compile with that
# optimisation off: XLA's own passes (fusion, algebraic simplification, layouts) are the ones users
# run; only each kernel's instruction selection is left unoptimised (measured, 2 cores: 354 -> 290 s).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0")
os.environ.setdefault("MPLBACKEND", "Agg")


def _pin_xdist_worker():
    """Under ``pytest -n K`` with K ≤ the cores this process may use, pin worker ``gwI`` to core I and give
    XLA and BLAS one thread each: the workers then never contend for a core (unpinned, each worker's thread
    pools span every core, and a test beside a multi-threaded one ran 2.5× slower than alone: 25.8 s
    against 10.7 s for ``test_minibatch_factor_is_unbiased``, measured)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and count.isdigit() and hasattr(os, "sched_setaffinity")):
        return
    cores = sorted(os.sched_getaffinity(0))
    if int(count) > len(cores):
        return
    os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ["XLA_FLAGS"] += " --xla_cpu_multi_thread_eigen=false"


_pin_xdist_worker()

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # shared test problems (tests/regression.py)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
