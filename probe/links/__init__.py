"""GPU-to-GPU links: NVLink / PCIe P2P per pair, vLLM's fully-connected verdict, measured copy bandwidth."""
