"""The tune worker child: its toolkit (torch, the kernel adapters, the timers), pre-build, and the items it measures."""
