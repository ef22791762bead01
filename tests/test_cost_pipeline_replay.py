"""torch's pipeline schedules replayed on a clock (cost/pipeline.py), and the MoE dispatch spread.

The interleaved order is checked against torch's own `ScheduleInterleaved1F1B` action lists; the replay's
idle time against the textbook bubble where both must agree (stages of equal weight); the routing spread
against a direct count over tokens.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import estimate_layout
from automodel_dist.cost.pipeline import idle_lower_bound, rank_actions, replay
from automodel_dist.cost.shape import model_shape
from automodel_dist.cost.throughput import routing_spread
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem, TrainingSpec

GRID = [(pp, vpp, n) for pp in (2, 3, 4, 8) for vpp in (2, 3, 4, 8) for n in range(1, 3 * pp + 1)
        if n % max(1, n // pp) == 0]


@pytest.mark.parametrize(("pp", "vpp", "n"), GRID)
def test_interleaved_order_is_torchs(pp: int, vpp: int, n: int) -> None:
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _ComputationType

    rounds = max(1, n // pp)
    stub = SimpleNamespace(n_local_stages=vpp, pp_group_size=pp, _n_microbatches=n,
                           microbatches_per_round=n // rounds)
    for rank in range(pp):
        theirs = [(a.stage_index, a.computation_type == _ComputationType.FORWARD, a.microbatch_index)
                  for a in ScheduleInterleaved1F1B._calculate_single_rank_operations(stub, rank) if a is not None]
        assert rank_actions(rank, pp, vpp, n, "interleaved1f1b") == theirs


@pytest.mark.parametrize(("pp", "vpp", "n"), GRID + [(pp, 1, n) for pp in (2, 4, 8) for n in range(1, 3 * pp + 1)])
def test_equal_stages_leave_the_textbook_bubble(pp: int, vpp: int, n: int) -> None:
    schedule = "interleaved1f1b" if vpp > 1 else "1f1b"
    run = replay(pp, vpp, n, schedule, (1.0 / vpp,) * (pp * vpp), 3.0)
    assert run.idle_share >= 0 and run.hops > 0
    if n % pp == 0:  # whole rounds: (pp-1) chunks of forward+backward idle per rank, against vpp·n of work
        assert run.idle_share == pytest.approx((pp - 1) / (vpp * n), abs=1e-9)
    gpipe = replay(pp, 1, n, "gpipe", (1.0,) * pp, 3.0)
    assert gpipe.idle_share == pytest.approx((pp - 1) / n, abs=1e-9)


def test_a_heavy_last_stage_sets_the_pace_and_more_stages_mean_more_hops() -> None:
    even = replay(4, 2, 8, "interleaved1f1b", (1.0,) * 8, 2.0)
    heavy = replay(4, 2, 8, "interleaved1f1b", (1.0,) * 7 + (1.5,), 2.0)
    assert heavy.busiest > even.busiest and heavy.makespan > even.makespan
    assert replay(4, 4, 8, "interleaved1f1b", (0.5,) * 16, 2.0).hops > even.hops


def test_replaying_part_of_many_rounds_extrapolates_exactly_for_equal_stages() -> None:
    stages = (0.25,) * 16
    long = replay(4, 4, 64, "interleaved1f1b", stages, 3.0)  # replays 4 rounds of 4 micro batches
    assert long.idle_share == pytest.approx(3 / (4 * 64), abs=1e-9)
    assert long.busiest == pytest.approx(64 * 4 * 0.25 * 4.0)


def _count_spread(experts: int, top_k: int, ep: int, local: int, balanced: bool) -> tuple[float, float]:
    rng = random.Random(0)
    per_rank = experts // ep
    ranks = domains = 0
    tokens = experts if balanced else 20000
    for i in range(tokens):
        chosen = ([(i * top_k + j) % experts for j in range(top_k)] if balanced
                  else rng.sample(range(experts), top_k))
        ranks += len({e // per_rank for e in chosen})
        domains += len({e // (per_rank * local) for e in chosen})
    return ranks / tokens, domains / tokens


@pytest.mark.parametrize(("experts", "top_k", "ep", "local"),
                         [(256, 8, 64, 8), (384, 8, 32, 8), (128, 8, 8, 8), (128, 4, 64, 8), (64, 6, 16, 8)])
@pytest.mark.parametrize("balanced", [True, False])
def test_routing_spread_counts_distinct_ranks_and_domains(experts, top_k, ep, local, balanced) -> None:
    ranks, domains = routing_spread(experts, top_k, ep, local, balanced)
    counted_ranks, counted_domains = _count_spread(experts, top_k, ep, local, balanced)
    tolerance = 1e-9 if balanced else 0.03
    assert ranks == pytest.approx(counted_ranks, rel=tolerance)
    assert domains == pytest.approx(counted_domains, rel=tolerance)


def test_fake_balanced_gate_sends_deepseek_tokens_to_one_node() -> None:
    """AutoModel's benchmark gate gives a DeepSeek-V3 token 8 consecutive experts: 2 of 64 EP ranks, both in
    one node, where a learned router reaches about 6 of the 8 nodes; DeepEP sends one copy per node."""
    assert routing_spread(256, 8, 64, 8, True) == (2.0, 1.0)
    assert routing_spread(256, 8, 64, 8, False)[1] > 5
    model = resolve_model("deepseek-ai/DeepSeek-V3")
    problem = Problem(model, ClusterSpec(get_gpu("h100"), 32, 8),
                      TrainingSpec(task="pretrain", seq_length=4096, global_batch_size=512))
    lay = Layout(world_size=256, global_batch_size=512, pp=4, vpp=8, ep=64, pp_schedule="interleaved1f1b",
                 local_batch_size=8, micro_batch_size=1, activation_checkpointing=True, dispatcher="hybridep")
    learned = estimate_layout(problem, lay, options=RecipeOptions())
    balanced = estimate_layout(problem, lay, options=RecipeOptions(balanced_gate=True))
    assert balanced.time["ep_comm"] < learned.time["ep_comm"] / 4
    assert balanced.memory_gib < learned.memory_gib  # no router logits kept either


def test_automodel_moe_keeps_no_expert_output_and_hugging_face_mixtral_does() -> None:
    training = TrainingSpec(task="pretrain", seq_length=4096, global_batch_size=8)
    for name, per_copy in (("openai/gpt-oss-120b", 1), ("Qwen/Qwen3-30B-A3B", 1), ("deepseek-ai/DeepSeek-V3", 1),
                           ("mistralai/Mixtral-8x7B-v0.1", 2)):
        spec = resolve_model(name)
        shape = model_shape(spec, training)
        assert shape.moe_act_expert == spec.experts_per_token * (
            per_copy * spec.hidden_size + 3 * spec.moe_intermediate_size), name
        # Megatron weights after the down projection and keeps the output AutoModel's classes do not
        assert shape.moe_act_output == (spec.experts_per_token * spec.hidden_size if per_copy == 1 else 0), name


def test_the_idle_lower_bound_never_exceeds_the_replay() -> None:
    """The planner's step-time floor uses the bound instead of replaying; it must stay a lower bound."""
    rng = random.Random(7)
    for _ in range(300):
        pp, vpp = rng.choice((2, 3, 4, 8)), rng.choice((1, 2, 3, 4, 8))
        n = rng.choice([m for m in range(1, 3 * pp + 1) if vpp == 1 or m % max(1, m // pp) == 0])
        stages = tuple(rng.uniform(0.5, 1.5) for _ in range(pp * vpp))
        ratio = rng.choice((2.0, 3.0))
        for schedule in (("interleaved1f1b",) if vpp > 1 else ("1f1b", "gpipe")):
            assert idle_lower_bound(pp, vpp, n, stages, ratio) <= replay(pp, vpp, n, schedule, stages,
                                                                          ratio).idle_share + 1e-12
