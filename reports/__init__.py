"""Renderers: tables, JSON, Markdown, HTML. Never call NVML or CUDA."""
