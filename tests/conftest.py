"""Test configuration: float64 for the reference tests, two forced host devices for sharding tests."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("MPLBACKEND", "Agg")

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # shared test problems (tests/regression.py)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
