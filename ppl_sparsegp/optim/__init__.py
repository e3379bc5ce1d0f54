"""What SVI steps with beyond NumPyro's optimisers: natural-gradient steps for q(u) (alternating with any
NumPyro optimiser on the other params), AdamW, schedules."""
from .natural_gradients import AnalyticELBO, NaturalGradient, gamma_ramp

__all__ = ["AnalyticELBO", "NaturalGradient", "gamma_ramp"]
