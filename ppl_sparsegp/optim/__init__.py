"""What SVI and SteinVI step with beyond NumPyro's own optimisers: natural-gradient steps for q(u)
(:mod:`~ppl_sparsegp.optim.natural_gradients`, alternating with any NumPyro optimiser on the other params),
:class:`AdamW` (:mod:`~ppl_sparsegp.optim.adamw`) and schedules (:mod:`~ppl_sparsegp.optim.schedules`)."""
from .adamw import AdamW
from .natural_gradients import AnalyticELBO, NaturalGradient, gamma_ramp, gamma_schedule
from .schedules import cyclical_annealing

__all__ = ["AdamW", "AnalyticELBO", "NaturalGradient", "cyclical_annealing", "gamma_ramp",
           "gamma_schedule"]
