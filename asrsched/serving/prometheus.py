"""Prometheus metrics: latency histograms and the text exposition served at ``GET /metrics``.

:class:`Histogram` is a fixed-bucket latency histogram (:data:`LATENCY_BUCKETS`, seconds);
:data:`HISTOGRAMS` names the four the scheduler keeps per policy (E2EL, TTFT, queue delay,
service time); :func:`metrics_text` writes the gauges, counters and histograms in the
Prometheus text format (version 0.0.4). Plain Python, no client library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["LATENCY_BUCKETS", "HISTOGRAMS", "Histogram", "metrics_text"]

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)

# key in the scheduler's ``hist`` -> (metric name, help text)
HISTOGRAMS = {
    "e2el": ("asrsched_e2e_latency_seconds", "Arrival to last byte (E2EL) of completed requests."),
    "ttft": ("asrsched_ttft_seconds", "Arrival to first transcribed text (TTFT)."),
    "queue_delay": ("asrsched_queue_delay_seconds", "Arrival to start of service."),
    "service": ("asrsched_service_seconds", "Start of service to completion."),
}


class Histogram:
    """Counts of observations per latency bucket, their sum and number (non-finite values are skipped)."""

    def __init__(self, buckets=LATENCY_BUCKETS):
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        if not math.isfinite(v):
            return
        i = 0
        while i < len(self.buckets) and v > self.buckets[i]:
            i += 1
        self.counts[i] += 1
        self.sum += v
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, c = [], 0
        for b, k in zip(self.buckets, self.counts):
            c += k
            out.append(f'{name}_bucket{{{labels},le="{b:g}"}} {c}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.sum:.6f}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


def metrics_text(
    *,
    policy: str,
    queue_depth: int,
    in_flight: int,
    slots: int,
    queued_work_s: float,
    outcomes: Mapping[str, int],
    audio_s_total: float,
    sched_s_total: float,
    sched_n: int,
    histograms: Mapping[str, Histogram],
) -> str:
    """Prometheus text exposition (version 0.0.4) of the server's state, every series labelled with ``policy``.

    ``histograms`` maps the keys of :data:`HISTOGRAMS` to their :class:`Histogram`.
    """
    p = f'policy="{policy}"'
    out = []

    def metric(name, kind, help_, rows):
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(rows)

    metric(
        "asrsched_queue_depth",
        "gauge",
        "Requests waiting in the policy-ordered queue.",
        [f"asrsched_queue_depth{{{p}}} {queue_depth}"],
    )
    metric(
        "asrsched_in_flight",
        "gauge",
        "Requests being served (worker or upstream slots in use).",
        [f"asrsched_in_flight{{{p}}} {in_flight}"],
    )
    metric("asrsched_slots", "gauge", "Worker (or upstream concurrency) slots.", [f"asrsched_slots{{{p}}} {slots}"])
    metric(
        "asrsched_queued_work_seconds",
        "gauge",
        "Estimated service time of the waiting requests.",
        [f"asrsched_queued_work_seconds{{{p}}} {max(queued_work_s, 0.0) + 0.0:.6f}"],
    )  # never -0.000000
    metric(
        "asrsched_requests_total",
        "counter",
        "Requests by outcome.",
        [f'asrsched_requests_total{{{p},outcome="{o}"}} {n}' for o, n in outcomes.items()],
    )
    metric(
        "asrsched_audio_seconds_total",
        "counter",
        "Seconds of audio transcribed.",
        [f"asrsched_audio_seconds_total{{{p}}} {audio_s_total:.6f}"],
    )
    metric(
        "asrsched_scheduling_seconds_total",
        "counter",
        "Time spent on header reads, size estimates and queue operations.",
        [f"asrsched_scheduling_seconds_total{{{p}}} {sched_s_total:.6f}"],
    )
    metric(
        "asrsched_scheduled_requests_total",
        "counter",
        "Requests that went through scheduling.",
        [f"asrsched_scheduled_requests_total{{{p}}} {sched_n}"],
    )
    for k, (name, help_) in HISTOGRAMS.items():
        metric(name, "histogram", help_, histograms[k].lines(name, p))
    return "\n".join(out) + "\n"
