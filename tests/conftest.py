"""Test configuration: float64 for the reference tests, two forced host devices for sharding tests, and
XLA's machine-code optimisation off."""
import os

# The fast suite is bound by compilation (thousands of small XLA programs), a third of which is LLVM
# optimising each fused kernel's machine code. The tests check values, so they compile with that
# optimisation off: XLA's own passes (fusion, algebraic simplification, layouts) are the ones users
# run; only each kernel's instruction selection is left unoptimised (measured, 2 cores: 354 -> 290 s).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0")
os.environ.setdefault("MPLBACKEND", "Agg")

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # shared test problems (tests/regression.py)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
