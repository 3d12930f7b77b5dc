"""The pure core: service-time model, scheduling policies, workloads, metrics (numpy/pandas only, no I/O)."""
