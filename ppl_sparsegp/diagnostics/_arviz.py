"""The one ArviZ import of the library (its 1.0 announcement silenced) and a context that quiets its
logger; private to :mod:`ppl_sparsegp.diagnostics`."""
from __future__ import annotations

import contextlib
import logging
import warnings

with warnings.catch_warnings():  # arviz 0.2x announces its 1.0 refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az  # noqa: F401  (re-exported: the diagnostics modules import az from here)

__all__: list[str] = []


@contextlib.contextmanager
def _quiet_arviz():
    """Silence ArviZ's "shape validation failed" log line (fewer than 2 chains)."""
    logger = logging.getLogger("arviz")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
