"""NVML, real or replayed: one session funnel, the protocol every facade speaks, the per-GPU reader."""
