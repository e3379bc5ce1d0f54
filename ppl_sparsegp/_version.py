"""The version of ppl_sparsegp: the one place it is written (``pyproject.toml`` reads it as its dynamic
version, :data:`ppl_sparsegp.__version__` re-exports it)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
