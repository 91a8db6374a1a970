"""The probe when NVML is unavailable: what torch.cuda sees, or why nothing does."""
