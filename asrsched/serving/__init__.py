"""Real serving: the policy-ordered HTTP server, its engine and metrics, the load generator, serving experiments.

* :mod:`.engine` -- faster-whisper on CPU as vLLM decodes (:class:`WhisperEngine`) and its size estimate.
* :mod:`.config` -- :class:`ServerConfig`, every server setting, validated.
* :mod:`.scheduler` -- :class:`PolicyServer`: the policy-ordered queue, admission, worker slots, timeouts, records.
* :mod:`.prometheus` -- latency histograms and the ``/metrics`` text.
* :mod:`.app` -- the OpenAI-compatible HTTP/SSE application and :func:`run_in_thread`.
* :mod:`.cli` -- ``asrsched serve``.
* :mod:`.loadgen` -- the open-loop load generator (``asrsched loadgen``).
* :mod:`.experiment` -- serving experiments: server processes, runs per policy and load, calibration, simulation.
"""
