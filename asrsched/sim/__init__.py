"""The simulator: continuous-batching engine, compiled kernels, sweeps, the multi-replica fleet and its routers."""
