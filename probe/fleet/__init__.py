"""`probe --ray`: the probe on every node of a Ray cluster, and the verdict over the nodes."""
