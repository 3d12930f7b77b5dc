"""Real serving: the policy-ordered HTTP server, its engine and metrics, the load generator, serving experiments.

* :mod:`.engine` -- faster-whisper on CPU as vLLM decodes (:class:`WhisperEngine`) and its size-estimate model.
* :mod:`.config` -- :class:`ServerConfig`, every server setting, validated.
* :mod:`.scheduler` -- :class:`PolicyServer`: the policy-ordered queue, admission, worker slots, timeouts, records.
* :mod:`.prometheus` -- latency histograms and the ``/metrics`` text.
* :mod:`.app` -- the OpenAI-compatible HTTP/SSE application and :func:`run_in_thread`.
* :mod:`.cli` -- ``asrsched serve``.
* :mod:`.loadgen` -- the open-loop load generator (``asrsched loadgen``).
* :mod:`.loadtools` -- the load generator against ``vllm bench serve``.
* :mod:`.experiment` -- serving experiments and the real-engine study: runs per policy and load (re-exports the
  names of the next five).
* :mod:`.servers` -- the servers an experiment starts (subprocesses) and their records.
* :mod:`.calibration` -- the closed-loop probe and the service model fitted to it.
* :mod:`.capacity` -- an engine's capacity (measured saturation, or the model's) as a ``sim.capacity.Capacity``.
* :mod:`.comparison` -- the simulator's replay of a real run and the real-vs-simulated table.
* :mod:`.study_stats` -- bootstrap CIs and verdicts of the real-engine study.
* :mod:`.vllm_steps` -- a batching engine's step times and the service model fitted to them.
"""
