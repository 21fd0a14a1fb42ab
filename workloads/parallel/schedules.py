"""Pipeline schedules (GPipe and 1F1B) as per-stage action lists; pure Python, no MindSpore.

A schedule for stage ``s`` of ``S`` over ``M`` micro-batches is a list of :class:`Action`:

==================  =================================================================================
``recv_fwd``        receive the activation of micro-batch ``mb`` from stage s-1
``forward``         run this stage's layers on micro-batch ``mb``
``send_fwd``        send the activation of ``mb`` to stage s+1
``recv_bwd``        receive the gradient of this stage's output for ``mb`` from stage s+1
``backward``        back-propagate ``mb`` through this stage (weights' grads accumulate)
``send_bwd``        send the gradient of this stage's input for ``mb`` to stage s-1
``send_fwd_recv_bwd``  on the s/s+1 link: send activation ``mb``, then receive gradient ``mb2``
``send_bwd_recv_fwd``  on the s-1/s link: receive activation ``mb2``, then send gradient ``mb``
==================  =================================================================================

Point-to-point here is a *rendezvous* (both peers take part, as a Broadcast in a two-rank group does), so
a plain 1F1B written with separate blocking sends and receives deadlocks: stage s would send activation
k while stage s+1 sends gradient j.  The steady phase therefore uses the combined exchanges (as
Megatron-LM does with batched isend/irecv), and every exchange moves the activation first, then the
gradient, on both sides.  :func:`link_events` and :func:`simulate` check this for any S and M.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class Action:
    op: str
    mb: int
    mb2: int | None = None  # second micro-batch of the combined exchanges (the one received)


def _forward(mb: int, first: bool, last: bool) -> list[Action]:
    """A forward of micro-batch `mb` on its own: receive its activation (unless the first stage), run, send it on
    (unless the last)."""
    return (
        ([Action("recv_fwd", mb)] if not first else [])
        + [Action("forward", mb)]
        + ([Action("send_fwd", mb)] if not last else [])
    )


def _backward(mb: int, first: bool, last: bool) -> list[Action]:
    """A backward of micro-batch `mb` on its own: receive its output's gradient (unless the last stage), run, send
    its input's gradient back (unless the first)."""
    return (
        ([Action("recv_bwd", mb)] if not last else [])
        + [Action("backward", mb)]
        + ([Action("send_bwd", mb)] if not first else [])
    )


def gpipe(stages: int, micro_batches: int, stage: int) -> list[Action]:
    """All forwards, then all backwards (same micro-batch order). Activation memory: M micro-batches."""
    first, last = stage == 0, stage == stages - 1
    acts: list[Action] = []
    for mb in range(micro_batches):
        acts += _forward(mb, first, last)
    for mb in range(micro_batches):
        acts += _backward(mb, first, last)
    return acts


def one_f_one_b(stages: int, micro_batches: int, stage: int) -> list[Action]:
    """PipeDream-flush / Megatron 1F1B: S-s-1 warm-up forwards, steady one-forward-one-backward, cool-down.

    Activation memory: at most S - s micro-batches in flight on stage s.
    """
    S, M, s = stages, micro_batches, stage
    first, last = s == 0, s == S - 1
    warm = min(S - s - 1, M)
    rest = M - warm
    acts: list[Action] = []
    for mb in range(warm):
        acts += _forward(mb, first, last)
    if rest > 0 and not first:
        acts.append(Action("recv_fwd", warm))
    for i in range(rest):
        fmb = warm + i
        acts.append(Action("forward", fmb))
        if not last:
            acts.append(Action("send_fwd_recv_bwd", fmb, i))
        acts.append(Action("backward", i))
        if not first:
            if i == rest - 1:
                acts.append(Action("send_bwd", i))
            else:
                acts.append(Action("send_bwd_recv_fwd", i, fmb + 1))
    for mb in range(rest, M):
        acts += _backward(mb, first, last)
    return acts


def schedule(name: str, stages: int, micro_batches: int, stage: int) -> list[Action]:
    if name == "gpipe":
        return gpipe(stages, micro_batches, stage)
    if name == "1f1b":
        return one_f_one_b(stages, micro_batches, stage)
    raise ValueError(f"unknown pipeline schedule {name!r} (expected one of {', '.join(SCHEDULES)})")


def link_events(actions: list[Action], side: str) -> list[tuple[str, int]]:
    """The ordered transfers one stage makes on one link.

    ``side='next'``: the link to stage s+1 (this stage is the lower end); ``side='prev'``: the link to s-1.
    Each transfer is ``('act', mb)`` or ``('grad', mb)``; both ends of a link must list the same sequence.
    """
    ev: list[tuple[str, int]] = []
    for a in actions:
        if side == "next":
            if a.op == "send_fwd":
                ev.append(("act", a.mb))
            elif a.op == "recv_bwd":
                ev.append(("grad", a.mb))
            elif a.op == "send_fwd_recv_bwd":
                ev += [("act", a.mb), ("grad", a.mb2)]
        else:
            if a.op == "recv_fwd":
                ev.append(("act", a.mb))
            elif a.op == "send_bwd":
                ev.append(("grad", a.mb))
            elif a.op == "send_bwd_recv_fwd":
                ev += [("act", a.mb2), ("grad", a.mb)]
    return ev


def simulate(
    name: str,
    stages: int,
    micro_batches: int,
    t_fwd: float = 1.0,
    t_bwd: float = 2.0,
    plans: list[list[Action]] | None = None,
) -> dict:
    """Run the schedule of every stage against each other with rendezvous transfers (zero transfer time).

    Raises RuntimeError on a deadlock or a mismatched link.  Returns ``{"makespan", "busy", "bubble_fraction"}``
    (per stage), the bubble measured on the simulated timeline: ``1 - busy / makespan``.  ``plans`` replaces
    the named schedule's per-stage action lists (to check a hand-written schedule).
    """
    S, M = stages, micro_batches
    if plans is None:
        plans = [schedule(name, S, M, s) for s in range(S)]
    # expand combined exchanges into their two transfers, keep compute actions
    steps: list[list[tuple]] = []
    for s, plan in enumerate(plans):
        seq: list[tuple] = []
        for a in plan:
            if a.op in ("forward", "backward"):
                seq.append((a.op, a.mb))
            elif a.op == "send_fwd":
                seq.append(("xfer", s, "act", a.mb))
            elif a.op == "recv_bwd":
                seq.append(("xfer", s, "grad", a.mb))
            elif a.op == "send_fwd_recv_bwd":
                seq += [("xfer", s, "act", a.mb), ("xfer", s, "grad", a.mb2)]
            elif a.op == "recv_fwd":
                seq.append(("xfer", s - 1, "act", a.mb))
            elif a.op == "send_bwd":
                seq.append(("xfer", s - 1, "grad", a.mb))
            elif a.op == "send_bwd_recv_fwd":
                seq += [("xfer", s - 1, "act", a.mb2), ("xfer", s - 1, "grad", a.mb)]
        steps.append(seq)
    pos = [0] * S
    clock = [0.0] * S
    busy = [0.0] * S
    done_f: set[tuple[int, int]] = set()
    done_b: set[tuple[int, int]] = set()
    progress = True
    while progress:
        progress = False
        for s in range(S):
            while pos[s] < len(steps[s]):
                item = steps[s][pos[s]]
                if item[0] in ("forward", "backward"):
                    if item[0] == "backward" and (s, item[1]) not in done_f:
                        raise RuntimeError(f"stage {s}: backward of micro-batch {item[1]} before its forward")
                    dt = t_fwd if item[0] == "forward" else t_bwd
                    clock[s] += dt
                    busy[s] += dt
                    (done_f if item[0] == "forward" else done_b).add((s, item[1]))
                    pos[s] += 1
                    progress = True
                    continue
                _, link, kind, mb = item
                peer = link + 1 if link == s else link
                if pos[peer] < len(steps[peer]) and steps[peer][pos[peer]] == item:
                    t = max(clock[s], clock[peer])
                    clock[s] = clock[peer] = t
                    pos[s] += 1
                    pos[peer] += 1
                    progress = True
                    continue
                break
    if any(pos[s] < len(steps[s]) for s in range(S)):
        stuck = {s: steps[s][pos[s]] for s in range(S) if pos[s] < len(steps[s])}
        raise RuntimeError(f"{name} S={S} M={M} deadlocks; waiting: {stuck}")
    for s in range(S):
        if len({mb for (st, mb) in done_f if st == s}) != M or len({mb for (st, mb) in done_b if st == s}) != M:
            raise RuntimeError(f"stage {s} did not run every micro-batch once")
    span = max(clock)
    return {"makespan": span, "busy": busy, "bubble_fraction": [1 - b / span for b in busy]}
