"""The simulator: the continuous-batching engine, its compiled twin, sweeps, the multi-replica fleet and its routers.

``simulate`` (:mod:`asrsched.sim.engine`) and the fleet (:mod:`asrsched.sim.fleet`) run the compiled engine
(:mod:`asrsched.sim.kernel`, driven by :mod:`asrsched.sim.compiled`) exactly when it implements the policies
and routers, and the Python reference otherwise.
"""
