"""torch.distributed.pipelining's schedules as AutoModel runs them, replayed on a clock (pure, no torch).

Each pp rank executes a fixed list of actions (forward or backward of one micro batch through one of its
stages), in the order torch's schedule builds it: `Schedule1F1B` (warm-up of pp - rank forwards, then one
backward one forward), `ScheduleGPipe` (all forwards, then all backwards) and `ScheduleInterleaved1F1B`
(`_get_1f1b_rank_ops` with `_get_warmup_ops`: (stages per rank - 1) micro batches per round plus two per
hop from the last rank, then 1F1B, then the cool-down). Stages sit round-robin on the ranks (AutoModel's
loop style). An action starts when its rank is free and its input has arrived: the forward of stage s
waits for stage s-1's forward of the same micro batch, the backward for stage s+1's backward. torch posts
the receive early but blocks on it right before the action (no independent work is pulled forward), so
the bubble is what this replay leaves idle, not the textbook (pp-1)/(stages per rank x micro batches),
and each stage's own work (AutoModel's layer split, the LM head on the last stage) sets the pace.

The replay counts the send/receive hops on its critical path: each costs one transfer the schedule cannot
hide, so the step's pipeline communication is hops x one transfer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

SIMULATED_SCHEDULES = ("1f1b", "gpipe", "interleaved1f1b")
# Past this many rounds of pp micro batches the idle time of a schedule no longer grows (warm-up and
# cool-down are fixed, the steady state is paced by the busiest rank): replay this many and keep the rest.
REPLAYED_ROUNDS = 4


@dataclass(frozen=True)
class ScheduleReplay:
    """One step of a schedule: `makespan` and the busiest rank's `busiest` work in the stage-time units
    given, and the send/receive `hops` on the critical path."""

    makespan: float
    busiest: float
    hops: int

    @property
    def idle_share(self) -> float:
        """Idle time of the busiest rank over its work (the bubble as a share of compute)."""
        return max(0.0, self.makespan - self.busiest) / self.busiest if self.busiest > 0 else 0.0


Action = tuple[int, bool, int]  # (stage, is_forward, micro batch)


@lru_cache(maxsize=4096)
def idle_lower_bound(pp: int, stages_per_rank: int, n_micro: int, forward: tuple[float, ...],
                     backward_ratio: float) -> float:
    """A lower bound on `replay(...).idle_share`, without replaying: rank r starts with the forward of its
    first stage (stage r), which waits for stages 0..r-1, and ends with that stage's backward, after which
    stages r-1..0 still run theirs; so the step lasts at least its own work plus both. Cached: the planner bounds
    thousands of layouts that share a few hundred splits."""
    stages = pp * stages_per_rank
    cycle = 1.0 + backward_ratio
    work = [n_micro * cycle * sum(forward[s] for s in range(r, stages, pp)) for r in range(pp)]
    busiest = max(work)
    if busiest <= 0:
        return 0.0
    makespan = max(work[r] + cycle * sum(forward[:r]) for r in range(pp))
    return (makespan - busiest) / busiest


def rank_actions(rank: int, pp: int, stages_per_rank: int, n_micro: int, schedule: str) -> list[Action]:
    """The compute actions of `rank`, in torch's order for `schedule`."""
    if schedule == "gpipe":
        return [(rank, True, m) for m in range(n_micro)] + [(rank, False, m) for m in range(n_micro)]
    if schedule == "1f1b":
        warmup = min(n_micro, pp - rank)
        actions: list[Action] = [(rank, True, m) for m in range(warmup)]
        forward = warmup
        for backward in range(n_micro):
            actions.append((rank, False, backward))
            if forward < n_micro:
                actions.append((rank, True, forward))
                forward += 1
        return actions
    return _interleaved_actions(rank, pp, stages_per_rank, n_micro)


def _interleaved_actions(rank: int, pp: int, vpp: int, n_micro: int) -> list[Action]:
    rounds = max(1, n_micro // pp)
    per_round = n_micro // rounds
    total = vpp * n_micro
    warmup = min((vpp - 1) * per_round + 2 * (pp - 1 - rank), total)
    next_mb: dict[tuple[int, bool], int] = {}

    def take(stage: int, forward: bool) -> Action:
        mb = next_mb.get((stage, forward), 0)
        next_mb[(stage, forward)] = mb + 1
        return stage, forward, mb

    def forward_stage(step: int) -> int:
        return (step // per_round) % vpp * pp + rank

    def backward_stage(step: int) -> int:
        return (vpp - 1 - ((step - warmup) // per_round) % vpp) * pp + rank

    actions: list[Action] = []
    for op in range(total + warmup):  # warm-up forwards, 1F1B pairs, cool-down backwards
        if op < total:
            actions.append(take(forward_stage(op), True))
        if op >= warmup:
            actions.append(take(backward_stage(op), False))
    return actions


@lru_cache(maxsize=4096)
def replay(pp: int, stages_per_rank: int, n_micro: int, schedule: str, forward: tuple[float, ...],
           backward_ratio: float) -> ScheduleReplay:
    """Replay one step. `forward[s]` is stage s's forward time for one micro batch; its backward takes
    `backward_ratio` times that (2, or 3 when full checkpointing replays the forward)."""
    replayed = n_micro
    if n_micro > REPLAYED_ROUNDS * pp and (schedule != "interleaved1f1b" or n_micro % pp == 0):
        replayed = REPLAYED_ROUNDS * pp
    stages = pp * stages_per_rank
    orders = [rank_actions(r, pp, stages_per_rank, replayed, schedule) for r in range(pp)]
    done: dict[Action, tuple[float, int]] = {}  # finish time and hops on the path that set it
    clock = [(0.0, 0)] * pp
    position = [0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            while position[r] < len(orders[r]):
                stage, is_forward, mb = orders[r][position[r]]
                if is_forward:
                    dep = (stage - 1, True, mb) if stage > 0 else None
                else:
                    dep = (stage + 1, False, mb) if stage < stages - 1 else (stage, True, mb)
                if dep is not None and dep not in done:
                    break
                start = clock[r]
                if dep is not None:
                    ready, hops = done[dep]
                    hops += dep[0] % pp != r  # input from another rank: one send/receive
                    start = max(start, (ready, hops))
                work = forward[stage] * (1.0 if is_forward else backward_ratio)
                done[(stage, is_forward, mb)] = clock[r] = (start[0] + work, start[1])
                position[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule} pp{pp} x{stages_per_rank} with {n_micro} micro batches "
                               "deadlocks")
    makespan, hops = max(clock)
    per_rank = [sum(forward[s] for s in range(r, stages, pp)) * (1.0 + backward_ratio) for r in range(pp)]
    busiest = max(per_rank) * replayed
    scale = n_micro / replayed  # the rounds not replayed run at the busiest rank's pace
    return ScheduleReplay(makespan=makespan + busiest * (scale - 1.0), busiest=busiest * scale, hops=hops)
