"""Test configuration: float64 for the reference tests, two forced host devices for sharding tests,
XLA compiling for speed of compilation, one compilation cache per test run shared by the workers, and
one MLIR context per thread for the lowerings (tests/mlir_context.py)."""
import os
import shutil
import subprocess
import sys
import tempfile


# The fast suite is bound by compilation (thousands of small XLA programs: every library call a test
# makes outside jit compiles each of its operations at their shapes). The fast tests check values at
# float64 or with tolerances that hold either way, so they compile for speed of compilation: LLVM's
# optimisation of each kernel's machine code off (measured, 2 cores: 354 -> 290 s) and the older
# fused-kernel emitters, not the MLIR fusion emitters (an eager collapsed_elbo 3.1 -> 1.5 s;
# test_stein/sparse/orthogonal/collapsed on 2 workers 374 -> 254 CPU-s with the cache below). XLA's own
# passes (fusion, algebraic simplification, layouts) are the ones users run. The slow tier (-m slow)
# compiles as users do: its float32 property test draws ill-conditioned cases whose float32 rounding
# differs without LLVM's optimisation (measured: inducing points, M = 60, a NaN bound at -O0, every case
# passes at the default level). A jaxlib that no longer knows the emitter flag would abort at start-up,
# so the flags are probed once first. The flags are set in pytest_configure (before any computation starts
# XLA), where the marker expression is known; xdist's workers and the tests' subprocesses inherit them.
#
# Both tiers run XLA's CPU kernels single-threaded (--xla_cpu_multi_thread_eigen=false): with one pytest
# worker per core the intra-op Eigen pool only oversubscribes the cores. It does not prevent the wedge
# CI met on the adequacy page (2026-11-27) and this machine on 2026-12-01 with the flag set: every thread
# idle, the main one waiting on a result, the two pool threads each in a batched LAPACK Cholesky
# (jaxlib's ParallelBatchMap splits the batch over the same pool and waits for it). The cause is fixed in
# the library (diagnostics.inference_data._map_draws: per-draw programs factorise one matrix at a time)
# and a test reads the compiled programs for batched factorisations (test_diagnostics_pointwise.py).
def _accepted(flags):
    """Whether this jaxlib starts with ``XLA_FLAGS=flags`` (an unknown flag aborts it at start-up)."""
    probe = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"],
                           env={**os.environ, "XLA_FLAGS": flags}, capture_output=True)
    return probe.returncode == 0


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # xdist's controller: hand out the files in the collection's
        config.option.loadscopereorder = False  # order (pytest_collection_modifyitems: LONGEST_FIRST)
    if "XLA_FLAGS" in os.environ:
        return
    flags, optional = "--xla_force_host_platform_device_count=2", ["--xla_cpu_multi_thread_eigen=false"]
    if "not slow" in (config.option.markexpr or ""):  # the fast suite (pyproject's default -m)
        # -O0 with the older emitters miscompiles at least one jitted Hessian (tests/test_xla_flags.py): compare
        # a jitted second derivative with an eager one in any test that needs it
        flags += " --xla_backend_optimization_level=0"
        optional.append("--xla_cpu_use_fusion_emitters=false")
    if _accepted(" ".join([flags, *optional])):
        flags = " ".join([flags, *optional])
    else:  # a jaxlib that dropped one of them: keep those it knows
        flags = " ".join([flags] + [f for f in optional if _accepted(f"{flags} {f}")])
    os.environ["XLA_FLAGS"] = flags


os.environ.setdefault("MPLBACKEND", "Agg")
# No Python tracebacks in the compiled programs' debug locations (they only label HLO for profilers):
# lowering thousands of small programs builds them for every operation (measured: 4-5% of the CPU time
# of test_diagnostics + test_sparse on one core). Exceptions keep their tracebacks.
os.environ.setdefault("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "0")
os.environ.setdefault("JAX_TRACEBACK_IN_LOCATIONS_LIMIT", "0")

# Many tests compile the same programs (the same model at the same shapes in another file, on the other
# worker, in a subprocess the test starts). A persistent compilation cache in a folder made for this run,
# shared by the pytest-xdist workers and the subprocesses (both inherit the variables from the
# controller, which imports this file first) and removed at the end, compiles each once: measured on
# test_stein/sparse/orthogonal/collapsed, 2 workers, 212 -> 191 s. Only programs that take 0.1 s or more to
# compile are written: writing every one (most are single operations that compile in ~15 ms) cost more than
# the other processes' hits saved once the lowerings shared their MLIR context (tests/mlir_context.py;
# measured 2026-12-03, those four files and test_docs_pages.py, 2 workers: every program 75.7-85.1 s, none
# 67.9-79.2 s, >= 0.03 s 68.6-70.2 s, >= 0.1 s 66.5 s). Nothing outlives the run, so no stale program can
# meet a changed library.
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="ppl_sparsegp-xla-cache-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

sys.path.insert(0, os.path.dirname(__file__))  # shared test problems (tests/regression.py)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_include_full_tracebacks_in_locations", False)  # as the variables above, should a
jax.config.update("jax_traceback_in_locations_limit", 0)  # plugin have imported jax before this file

import mlir_context  # noqa: E402 -- the tests' lowerings share one MLIR context per thread (its docstring)

mlir_context.install()


# The order in which pytest-xdist's whole-file scheduling (--dist loadfile) hands out the files: the longest
# first (longest-processing-time-first), so that the last files to start are short and both workers end
# together. xdist's default orders the files by their number of tests, which starts the long files with few
# tests last (measured 2026-12-02, 2 workers: the docs pages, 3 tests and the suite's longest file, the
# choose_features files, 4 and 24 tests). The figures are the files' summed --durations=0 on 2 cores (s;
# a fresh clone at 5ea3c60, 2026-12-02: 830.6 s in all);
# a file not named keeps its collection order after these, and a stale figure only costs balance.
LONGEST_FIRST = {"test_docs_pages_second.py": 85, "test_docs_pages.py": 82, "test_natural_gradients.py": 53,
                 "test_spherical.py": 32, "test_marginal.py": 30, "test_pilot_families.py": 29,
                 "test_collapsed.py": 28, "test_decoupled.py": 25, "test_linalg.py": 24, "test_fourier.py": 23,
                 "test_orthogonal.py": 22, "test_diagnostics.py": 21, "test_natural_gradients_step.py": 20,
                 "test_activation.py": 19, "test_harmonic.py": 18, "test_properties.py": 16, "test_pilot.py": 16,
                 "test_integral_transform.py": 16, "test_spherical_fit.py": 16}


# ... except a file that clears JAX's caches, which goes before them: test_parameters' debug_checks test
# turns the checks on and off, and each switch clears every compiled program of the process (debug_checks'
# contract), so mid-run the programs its worker had compiled are compiled again (or read back from the
# persistent cache) by the files after it; first, nothing is lost. The test took 1.2 s alone and 15-38 s
# mid-suite (measured; the cause of the difference not yet found)
CLEARS_CACHES = ("test_parameters.py",)


def pytest_collection_modifyitems(config, items):
    """Items of the files in CLEARS_CACHES first, then of LONGEST_FIRST, longest file first; each file's
    items keep their order, the other files theirs."""
    order = [*CLEARS_CACHES, *sorted(LONGEST_FIRST, key=lambda n: -LONGEST_FIRST[n])]
    rank = {name: i for i, name in enumerate(order)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):  # the process that made the folder removes it
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
