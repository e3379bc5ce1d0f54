"""Runners for the models of ``models/``: ``python -m inference fit <model> --method svi|nuts|stein|map``.

See :mod:`inference.runner`. Imports run one way: ``inference → models → ppl_sparsegp``.
"""
