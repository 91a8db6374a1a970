"""Timing, correctness checks and recommendations over real kernels."""
