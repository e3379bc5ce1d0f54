"""What SVI and SteinVI step with beyond NumPyro's own optimisers: :class:`AdamW`
(:mod:`~ppl_sparsegp.optim.adamw`) and schedules (:mod:`~ppl_sparsegp.optim.schedules`)."""
from .adamw import AdamW
from .schedules import cyclical_annealing

__all__ = ["AdamW", "cyclical_annealing"]
