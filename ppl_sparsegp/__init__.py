"""ppl_sparsegp: large-scale Gaussian processes in NumPyro through spectral and inter-domain features."""
