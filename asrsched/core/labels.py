"""One label table: how tables, figures and prose name the estimators and the latency metrics.

Metric names follow ``vllm bench serve``: ``E2EL`` (end-to-end latency), ``TTFT`` (time to
first token), percentiles as ``P50`` / ``P90`` / ``P99``. A column name such as
``p90_e2el_ms`` or ``mean_ttft`` is read as statistic, metric and unit
(:func:`metric_label`).

    >>> metric_label("p90_e2el_ms"), metric_label("e2el", "mean"), metric_label("ttft")
    ('P90 E2EL', 'mean E2EL', 'TTFT')
    >>> estimator_label("mixed_dq"), estimator_label("tie: qdq, wdq")
    ('mixed DQ', 'tie (qDQ, wDQ)')
    >>> router_label("pod2"), router_label("jsq"), router_label(1, 20), router_label(20, 20)
    ('Power-of-2', 'JSQ', 'random', 'JSQ')
"""

from __future__ import annotations

__all__ = ["ESTIMATOR_LABELS", "ESTIMATOR_ORDER", "METRIC_LABELS", "estimator_label", "metric_label", "router_label"]

#: display names of the A/B estimators (one spelling in tables, figures and prose)
ESTIMATOR_LABELS = {
    "naive": "naive",
    "group": "group",
    "switchback": "switchback",
    "qdq": "qDQ",
    "wdq": "wDQ",
    "qtdq": "qDQ (time-integral)",
    "mixed_dq": "mixed DQ",
    "mixed_dq_qt": "mixed DQ (time-integral)",
    "mixed_dq_oracle": "mixed DQ (oracle α)",
}
#: the estimators in the order every table and figure shows them (both A/B studies)
ESTIMATOR_ORDER = ["naive", "group", "switchback", "qdq", "wdq", "mixed_dq", "mixed_dq_oracle", "qtdq", "mixed_dq_qt"]
#: display names of the latency metrics
METRIC_LABELS = {"e2el": "E2EL", "ttft": "TTFT"}


def estimator_label(name: str) -> str:
    """Display name of an estimator; ``"tie: a, b"`` (a statistical tie) becomes ``"tie (A, B)"``."""
    name = str(name)
    if name.startswith("tie: "):
        return "tie (" + ", ".join(ESTIMATOR_LABELS.get(x, x) for x in name[5:].split(", ")) + ")"
    return ESTIMATOR_LABELS.get(name, name)


def _stat_label(stat: str) -> str:
    return stat.upper() if stat[:1] == "p" and stat[1:].isdigit() else stat


def metric_label(name: str, stat: str | None = None) -> str:
    """``"P90 E2EL"``, ``"mean TTFT"``, ...: a metric (``"e2el"``) with an optional statistic, or a column
    name ``{stat}_{metric}[_ms|_s]``; a name that is neither comes back as it is."""
    if stat is not None:
        return f"{_stat_label(stat)} {METRIC_LABELS[name]}"
    if name in METRIC_LABELS:
        return METRIC_LABELS[name]
    parts = name.removesuffix("_ms").removesuffix("_s").split("_")
    if len(parts) == 2 and parts[1] in METRIC_LABELS and (parts[0] == "mean" or _stat_label(parts[0]) != parts[0]):
        return f"{_stat_label(parts[0])} {METRIC_LABELS[parts[1]]}"
    return name


def router_label(router: str | int, n_servers: int | None = None) -> str:
    """Display name of a Power-of-d router: ``"random"`` (d = 1), ``"JSQ"`` (d = N), else ``"Power-of-<d>"``.

    ``router`` is a name (``"random"``, ``"jsq"``, ``"pod3"``) or the integer ``d`` (then ``n_servers``
    tells JSQ apart); any other name comes back as it is.
    """
    if isinstance(router, int) and not isinstance(router, bool):
        return "random" if router == 1 else ("JSQ" if router == n_servers else f"Power-of-{router}")
    r = str(router)
    return {"random": "random", "jsq": "JSQ"}.get(
        r, f"Power-of-{r[3:]}" if r.startswith("pod") and r[3:].isdigit() else r
    )
