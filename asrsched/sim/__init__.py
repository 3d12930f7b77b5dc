"""The simulator: continuous-batching engine, compiled kernels, sweeps, the multi-replica fleet and its routers.

``simulate`` (:mod:`asrsched.sim.engine`) runs compiled (:mod:`asrsched.sim.kernels`) for the built-in policies
and for static policies registered with :func:`asrsched.sim.kernels.register_static_policy`.
"""
