"""The test processes lower their programs in one MLIR context per thread, renewed every ``RENEW`` lowerings.

The fast suite is bound by compilation: thousands of small XLA programs, most of them single operations
that a test or the library runs outside ``jit`` (``add``, ``broadcast_in_dim``, ... at each new shape).
JAX builds a fresh MLIR context for every lowering (``jax._src.interpreters.mlir.make_ir_context``:
register and load every dialect) and frees it after, so that the attributes and types uniqued in it, a
program's constants among them, do not outlive the program. Here each thread shares one context over
``RENEW`` lowerings, which keeps that bound (the context and what it holds go at each renewal) and pays
the set-up once per ``RENEW`` programs. A lowering that starts while another's context is entered (an
operation evaluated as the outer program's IR is built) still gets a fresh context. Measured,
``tests/optim/test_natural_gradients.py`` on one core: 55-57 s -> 38-42 s, and 76 -> 58 s at another
hour of the same machine. The programs are the same: the context owns the IR while it is built; it enters
neither the HLO that XLA compiles nor the persistent compilation cache's key (the module's bytecode).

``install()`` is called by ``tests/conftest.py`` (the pytest processes) and ``tests/page_runner.py`` (the
docs pages' process). It patches a private function of JAX; a JAX without it keeps its own behaviour,
and ``tests/test_xla_flags.py`` checks that the patch is in place and that it changes no program.
"""
import threading

RENEW = 1000  # lowerings per context
_local = threading.local()


def install():
    """Makes JAX's lowerings share one MLIR context per thread; returns whether it could (a JAX without
    ``mlir.make_ir_context`` keeps a fresh context per lowering)."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir
    except ImportError:
        return False
    fresh = getattr(mlir, "make_ir_context", None)
    if fresh is None or getattr(fresh, "shared_per_thread", False):
        return fresh is not None

    def make_ir_context():
        # a lowering that starts while another's context is entered (an operation evaluated as the outer
        # program's IR is built) gets a fresh one: in the same context it would inherit the outer insertion
        # point, and the compilation cache's copy of the inner module would land inside the outer program
        # (measured: "symbol's parent must have the SymbolTable trait" in six tests, Hermite features' scan)
        if ir.Context.current is not None:
            return fresh()
        if getattr(_local, "uses", RENEW) >= RENEW:
            _local.context, _local.uses = fresh(), 0
        _local.uses += 1
        return _local.context

    make_ir_context.shared_per_thread = True
    make_ir_context.fresh = fresh
    mlir.make_ir_context = make_ir_context
    return True
