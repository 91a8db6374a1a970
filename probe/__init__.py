"""Device facts: NVML (or torch.cuda) inventory, CUDA_VISIBLE_DEVICES mapping, NVLink/P2P."""
