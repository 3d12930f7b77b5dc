"""The compiled engine's state for one run: fed all at once or chunk by chunk, records handed out in batches.

:mod:`asrsched.sim.kernel` is the compiled ASR engine (a fleet of ``N`` replicas; a single
server is ``N = 1``); :class:`CompiledRun` owns its arrays, so every call of the kernel resumes
where the last stopped. A run is fed all at once (:meth:`CompiledRun.run`) or chunk by chunk
(:meth:`CompiledRun.feed`, :meth:`CompiledRun.close`): the jobs still in the system are carried
into the next chunk's arrays, so memory is bounded by the chunk plus the number in system, and
finished records reach a ``write(columns)`` callback in batches. What the kernel is given comes
from :mod:`asrsched.sim.inputs`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from asrsched.core import rulebook as rb
from asrsched.core.service import WORK_TOKEN_GRID
from asrsched.sim import kernel as K

__all__ = ["CompiledRun", "single_router", "router_inputs"]


def router_inputs(
    routers: Sequence[tuple[str, int, np.ndarray, int]], route_arm, cands, n: int, n_replicas: int
) -> K.Routing:
    """The kernel's :class:`~asrsched.sim.kernel.Routing`: ``routers[arm] = (registry key, d, uniforms, instance)``."""
    n_inst = max(r[3] for r in routers) + 1
    U = np.zeros((n_inst, max(1, max(len(r[2]) for r in routers))))
    code = np.zeros(n_inst, np.int64)
    d = np.ones(n_inst, np.int64)
    inst_of_arm = np.zeros(len(routers), np.int64)
    for arm, (key, dd, u, inst) in enumerate(routers):
        U[inst, : len(u)] = u
        code[inst] = K.ROUTER_CODES[key]
        d[inst] = int(dd)
        inst_of_arm[arm] = inst
    C = np.zeros((len(routers), n_replicas), np.int64)
    nc = np.zeros(len(routers), np.int64)
    for arm, c in enumerate(cands):
        C[arm, : len(c)] = c
        nc[arm] = len(c)
    arms = np.zeros(n, np.int64) if route_arm is None else np.ascontiguousarray(route_arm, np.int64)
    return K.Routing(
        arms,
        inst_of_arm,
        code,
        d,
        U,
        np.zeros(n_inst, np.int64),
        np.zeros(n_inst, np.int64),
        C,
        nc,
        np.empty(n_replicas, np.int64),
        np.empty(n_replicas, np.int64),
        np.empty(n_replicas),
    )


def single_router(n: int) -> K.Routing:
    """One replica: a router that always answers it (round robin over one candidate draws nothing)."""
    return router_inputs([("round_robin", 1, np.empty(0), 0)], None, [[0]], n, 1)


# ----------------------------------------------------------------------------- one run


_REQ_FIELDS = K.Requests._fields
_PER_REQUEST_OUT = ("admit", "first", "finish", "replica")


class CompiledRun:
    """The compiled engine's state for one run of ``n_replicas`` replicas (see the module docstring).

    ``policies``: each replica's initial kernel code (:func:`policy_inputs`); ``steps[b]``: the
    decode step time at batch ``b`` (``steps[0] = 0``); ``routing``: :func:`router_inputs`, or
    ``None`` for one replica; ``switches``: ``(request index, time, kernel code[, replica])``
    (replica ``-1`` or left out: every replica); ``work``: whether a router reads the estimated
    work (the requests then need ``est_q``).
    ``timeline_points`` (one replica only) keeps a thinned ``(time, running, waiting)`` sample of
    the decision points; ``write`` (streaming) receives the finished records in batches of about
    ``flush_every``.
    """

    def __init__(
        self,
        policies: Sequence[int],
        *,
        max_num_seqs: int,
        steps,
        overhead: float,
        params: dict,
        routing: K.Routing | None = None,
        switches: Sequence[tuple] = (),
        work: bool = False,
        timeline_points: int = 0,
        write: Callable[[dict], None] | None = None,
        flush_every: int = 100_000,
    ) -> None:
        M = int(max_num_seqs)
        if M < 1:
            raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
        self.N = N = len(policies)
        self.M = M
        self.write = write
        self.flush_every = max(1, int(flush_every))
        self.routing = routing
        self.sw = K.Switches(
            np.array([s[0] for s in switches], np.int64),
            np.array([s[1] for s in switches], float),
            np.array([s[2] for s in switches], np.int64),
            np.array([s[3] if len(s) > 3 else -1 for s in switches], np.int64),
        )
        self._p = dict(
            max_num_seqs=M,
            steps=np.ascontiguousarray(steps, np.float64),
            overhead=float(overhead),
            low_depth=int(params["low_depth"]),
            ratio_cap=float(params["ratio_cap"]),
            min_service=float(params["min_service"]),
            grid=int(WORK_TOKEN_GRID),
            final=False,
            flush_at=self.flush_every,
            keep_out=write is not None,
            timeline=timeline_points > 0 and N == 1,
            work=bool(work),
        )
        W = (M + 7) // 8 * 8  # running slots per replica: whole SIMD widths
        z = functools.partial(np.zeros, N, np.int64)
        self.rep = K.Replicas(
            np.zeros(N),
            z(),
            z(),
            np.full(N, K.NOSTEP, np.int64),
            z(),
            z(),
            z(),
            z(),
            np.full(N, -1, np.int64),
            np.full(N, -1, np.int64),
            np.zeros(N),
            z(),
            z(),
            np.array(policies, np.int64),
            np.zeros(3 * N, np.int64),
            z(),
        )
        self.rs = K.Running(
            np.full((N, W), K.NOSTEP, np.int64),
            np.zeros((N, W), np.int64),
            np.full((N, W), K.NONE, np.int64),
            np.zeros((N, M), np.int64),
        )
        cap = max(16, int(timeline_points)) if self._p["timeline"] else 0
        self.tl = (np.empty(cap), np.empty(cap, np.int64), np.empty(cap, np.int64), np.zeros(cap, np.bool_))
        self.out_j = np.empty(self.flush_every + M + 1 if write is not None else 0, np.int64)
        self.ctl = np.zeros(len(K.CTL), np.int64)
        self.ctl[K.CTL["stride"]] = 1
        self.req: K.Requests | None = None
        self.q: K.Queues | None = None
        self.rows: dict[str, np.ndarray] = {}  # per-request columns of the records the kernel does not read
        self.res: dict[str, np.ndarray] = {}  # admit, first, finish, replica
        self.n_requests = 0
        self.pending: list[dict] = []
        self.n_pending = 0
        self.n_written = 0

    # -- all at once --
    def run(self, req: K.Requests, out: tuple | None = None) -> dict[str, np.ndarray]:
        """One in-memory run of every request of ``req``; returns ``admit, first, finish, replica``.

        ``out``: four arrays to write them into (float64 x 3, int64; one entry per request).
        """
        n = len(req.arrival)
        if out is None:
            out = (np.empty(n), np.empty(n), np.empty(n), np.empty(n, np.int64))
        for x, dt in zip(out, (np.float64, np.float64, np.float64, np.int64)):
            if x.dtype != dt or x.shape != (n,) or not x.flags.c_contiguous or not x.flags.writeable:
                raise ValueError(
                    "out: need four writeable C-contiguous arrays of one entry per request (float64 x 3, int64)"
                )
        for x in out[:3]:
            x[:] = np.nan
        out[3][:] = 0
        self.res = dict(zip(_PER_REQUEST_OUT, out))
        self.req = req
        self._p["final"] = True
        cap = n if self.N == 1 else min(256, max(n, 1))
        self.q = _queues(self.N, cap, n)
        self._loop()
        return self.res

    # -- chunk by chunk --
    def feed(self, req: K.Requests, rows: dict[str, np.ndarray]) -> None:
        """Add the next chunk of arrivals (non-decreasing, after the previous chunk's) and run what it decides.

        ``rows``: the chunk's other record columns (``rid``, ``duration``, ``language`` codes).
        """
        self._carry(req, rows)
        self._loop()

    def close(self) -> None:
        """No more arrivals: drain, and write the last batch."""
        if self.req is None:
            e = np.empty(0)
            self._carry(
                K.Requests(e, e, e, np.empty(0, np.int64), np.empty(0, np.int64), e),
                {"rid": np.empty(0, np.int64), "duration": e, "language": np.empty(0, np.int64)},
            )
        self._p["final"] = True
        self._close_timeline()
        self._loop()
        self._take_out()
        self._flush()

    # -- internals --
    def _loop(self) -> None:
        assert self.req is not None and self.q is not None  # run() and feed() set them
        routing = self.routing if self.routing is not None else single_router(len(self.req.arrival))
        o = self.res
        while True:
            out = K.Output(o["admit"], o["first"], o["finish"], o["replica"], self.out_j, *self.tl)
            status = K.call(K.Params(**self._p), self.req, self.q, self.rep, self.rs, routing, self.sw, out, self.ctl)
            if status == K.FULL:
                self.q = _grow(self.q, self.N)
            elif status == K.FLUSH:
                self._take_out()
                self._flush()
            else:
                return

    def _carry(self, new: K.Requests, rows: dict[str, np.ndarray]) -> None:
        """The next chunk's arrays: the jobs still in the system, then the new arrivals; every index remapped."""
        n_new = len(new.arrival)
        self._open_timeline(new.arrival)
        if self.req is None:
            alive = np.empty(0, np.int64)
            req = new
            self.rows = dict(rows)
            res = {k: np.full(n_new, np.nan) for k in _PER_REQUEST_OUT[:3]}
            res["replica"] = np.zeros(n_new, np.int64)
        else:
            self._take_out()
            alive = np.flatnonzero(np.isnan(self.res["finish"]))
            req = K.Requests(
                *(
                    np.concatenate(
                        [
                            getattr(self.req, f)[alive] if len(getattr(self.req, f)) else getattr(self.req, f),
                            getattr(new, f),
                        ]
                    )
                    for f in _REQ_FIELDS
                )
            )
            self.rows = {k: np.concatenate([v[alive], rows[k]]) for k, v in self.rows.items()}
            res = {k: np.concatenate([self.res[k][alive], np.full(n_new, np.nan)]) for k in _PER_REQUEST_OUT[:3]}
            res["replica"] = np.concatenate([self.res["replica"][alive], np.zeros(n_new, np.int64)])
        c = len(alive)
        n = c + n_new
        old_q = self.q
        cap = max(n, 1) if self.N == 1 else max(256, old_q.kid.shape[0] // self.N if old_q is not None else 0)
        q = _queues(self.N, cap, n)
        if old_q is not None:
            assert self.req is not None  # queues exist only after a first chunk
            waiting = np.isnan(self.res["admit"][alive])
            _remap(
                alive,
                len(self.req.arrival),
                old_q,
                q,
                self.rep,
                self.rs,
                self.M,
                cap,
                self.N,
                waiting,
                self.res["replica"][alive],
            )
            self.ctl[K.CTL["j"]] = c
        self.req, self.q, self.res = req, q, res
        self.n_requests += n_new

    def _open_timeline(self, arrival: np.ndarray) -> None:
        """Timeline points still counting arrivals (every one of their chunk came by then): count this chunk's too."""
        tn = int(self.ctl[K.CTL["tl_n"]])
        if not tn or not len(arrival):
            return
        t, _, w, op = (x[:tn] for x in self.tl)
        idx = np.flatnonzero(op)
        if len(idx):
            k = np.searchsorted(arrival, t[idx], side="right")
            w[idx] += k
            op[idx] = k == len(arrival)

    def _close_timeline(self) -> None:
        tn = int(self.ctl[K.CTL["tl_n"]])
        self.tl[3][:tn] = False

    def _take_out(self) -> None:
        """Move the finished records out of the kernel's buffer (kept until a batch is full)."""
        n_out = int(self.ctl[K.CTL["n_out"]])
        if not n_out or self.write is None:
            return
        idx = self.out_j[:n_out]
        r, req = self.res, self.req
        assert req is not None
        self.pending.append(
            {
                "rid": self.rows["rid"][idx],
                "arrival": req.arrival[idx],
                "duration": self.rows["duration"][idx],
                "language": self.rows["language"][idx],
                "est_service": req.est[idx],
                "tokens": req.tokens[idx],
                "admit": r["admit"][idx],
                "first_token": r["first"][idx],
                "finish": r["finish"][idx],
            }
        )
        self.n_pending += n_out
        self.ctl[K.CTL["n_out"]] = 0
        self._p["flush_at"] = max(1, self.flush_every - self.n_pending)

    def _flush(self) -> None:
        if not self.pending:
            return
        parts = self.pending
        cols = parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        self.pending, self.n_pending = [], 0
        self._p["flush_at"] = self.flush_every
        self.n_written += len(cols["rid"])
        assert self.write is not None  # pending rows exist only with a writer
        self.write(cols)

    # -- results --
    @property
    def events(self) -> int:
        return int(self.rep.events.sum())

    def timeline(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tn = int(self.ctl[K.CTL["tl_n"]])
        return self.tl[0][:tn].copy(), self.tl[1][:tn].copy(), self.tl[2][:tn].copy()

    def mode_counts(self) -> dict:
        """The adaptive policy's decisions per mode, summed over the replicas (``{}`` if none runs it)."""
        if not (self.rep.policy == rb.ADAPTIVE).any() and not (self.sw.code == rb.ADAPTIVE).any():
            return {}
        m = self.rep.modes.reshape(self.N, 3).sum(axis=0)
        return {"fcfs": int(m[rb.MODE_FCFS]), "sjf": int(m[rb.MODE_SJF]), "hrrn": int(m[rb.MODE_HRRN])}


def _queues(N: int, cap: int, n: int) -> K.Queues:
    """Empty waiting queues: ``cap`` entries per replica, per-request arrays for ``n`` requests."""
    m = N * cap
    return K.Queues(
        np.empty(m),
        np.empty(m),
        np.empty(m, np.int64),
        np.empty(m, np.int64),
        np.empty(m),
        np.empty(m),
        np.zeros(n, np.int64),
        np.zeros(n, np.bool_),
        np.full(n, -1, np.int64),
    )


def _grow(q: K.Queues, N: int) -> K.Queues:
    """Every replica's queue room doubled (the layout is ``[replica, entry]``)."""
    cap = q.kid.shape[0] // N

    def g(x):
        y = np.empty((N, 2 * cap), x.dtype)
        y[:, :cap] = x.reshape(N, cap)
        return y.ravel()

    return q._replace(k1=g(q.k1), k2=g(q.k2), kid=g(q.kid), sid=g(q.sid), sarr=g(q.sarr), sinv=g(q.sinv))


def _remap(
    alive: np.ndarray,
    n_old: int,
    old: K.Queues,
    q: K.Queues,
    rep: K.Replicas,
    rs: K.Running,
    M: int,
    cap: int,
    N: int,
    waiting: np.ndarray,
    replica: np.ndarray,
) -> None:
    """Carry the queues, FIFOs and running sets over to the new request indices (``alive[i]``: old index of new ``i``).

    ``waiting`` and ``replica``: per carried request (new index), whether it waits and where.

    A monotone remap keeps every order (FIFO, heap ties, slot scans). A heap is rebuilt sorted
    (a sorted array is a heap), without the adaptive policy's dead entries.
    """
    remap = np.full(n_old, -1, np.int64)
    remap[alive] = np.arange(len(alive))
    old_cap = old.kid.shape[0] // N
    q.alive[: len(alive)] = old.alive[alive]
    for r in range(N):
        ob, nb = r * old_cap, r * cap
        h = int(rep.heap_n[r])
        if h:
            ids = old.kid[ob : ob + h]
            k1, k2 = old.k1[ob : ob + h], old.k2[ob : ob + h]
            keep = (remap[ids] >= 0) & ((rep.policy[r] != rb.ADAPTIVE) | old.alive[ids])
            ids, k1, k2 = remap[ids[keep]], k1[keep], k2[keep]
            order = np.lexsort((ids, k2, k1))
            m = len(order)
            q.kid[nb : nb + m], q.k1[nb : nb + m], q.k2[nb : nb + m] = ids[order], k1[order], k2[order]
            rep.heap_n[r] = m
        s = int(rep.slot_n[r])
        if s:
            ids = remap[old.sid[ob : ob + s]]
            q.sid[nb : nb + s] = ids
            q.sarr[nb : nb + s] = old.sarr[ob : ob + s]
            q.sinv[nb : nb + s] = old.sinv[ob : ob + s]
            q.spos[ids] = np.arange(s)
        if rep.head[r] >= 0:  # the FIFO, relinked in the new indices: its waiting requests in submission order
            ids = np.flatnonzero(waiting & (replica == r))
            q.nxt[ids[:-1]] = ids[1:]
            q.nxt[ids[-1]] = -1
            rep.head[r], rep.tail[r] = ids[0], ids[-1]
        nr, npend = int(rep.nrun[r]), int(rep.npend[r])
        rs.rid[r, :nr] = remap[rs.rid[r, :nr]]
        rs.pend[r, :npend] = remap[rs.pend[r, :npend]]
