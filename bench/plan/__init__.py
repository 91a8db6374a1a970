"""The tune plan: which (backend, block size, workload) rows to time, asked of the explain rules."""
