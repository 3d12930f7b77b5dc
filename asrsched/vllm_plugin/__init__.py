"""vLLM integration: the duration-aware scheduler plug-in, an in-process backend, the GPU benchmark driver.

* :mod:`.scheduler` -- the ``--scheduler-cls`` plug-in (the vLLM scheduler classes, the step log; re-exports
  the names of the next three).
* :mod:`.config` -- :class:`~asrsched.vllm_plugin.config.PluginConfig`, the plug-in's settings.
* :mod:`.size_estimate` -- :class:`~asrsched.vllm_plugin.size_estimate.SizeEstimator`, one request's size.
* :mod:`.request_queue` -- :class:`~asrsched.vllm_plugin.request_queue.PolicyRequestQueue`, the waiting queue.
* :mod:`.middleware` -- the ASGI middleware that gives every upload its duration.
* :mod:`.backend` -- vLLM in process; :mod:`.bench` -- the benchmark driver.
"""
