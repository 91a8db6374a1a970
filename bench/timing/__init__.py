"""Timing GPU work: statistics, the GPU timers (CUDA graphs, cold L2, CUPTI), the launch-mode label."""
