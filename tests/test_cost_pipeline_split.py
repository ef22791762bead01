"""Pipeline splits against AutoModel 0.7.0's own functions, and the cost model judging every rank of them.

Oracle: `calculate_virtual_stages` (stage count), `generate_hf_model_fqn_per_model_part` (which layers,
embedding, norm and head each stage holds) and `stage_ids_this_rank` with the style
`split_model_into_stages` picks from the schedule class (which stages each pp rank runs). Checked for every
layer count in the catalog, every pp up to 64 and every stage count per rank the planner can emit (and the
multi-stage schedule names a recipe may hold).
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from automodel_dist.catalog.models import list_models, resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cost import memory, throughput
from automodel_dist.cost.model import estimate_layout, memory_by_pp_rank
from automodel_dist.cost.shape import model_shape
from automodel_dist.layout import Layout
from automodel_dist.pipeline_stages import layers_per_stage, pipeline_split, virtual_stage_options
from automodel_dist.planner import MAX_VPP
from automodel_dist.problem import Problem, TrainingSpec

LAYER_COUNTS = sorted({preset.spec.num_layers for preset in list_models()})
SINGLE = ("1f1b", "gpipe")
MULTI = ("interleaved1f1b", "loopedbfs", "interleavedzerobubble", "dualpipev")
LAYER = re.compile(r"^model\.layers\.(\d+)$")


@cache
def automodel_stages(num_layers: int, num_stages: int) -> tuple[tuple[frozenset[int], bool, bool], ...]:
    """(layer indices, embedding, head) per stage as AutoModel generates the stage modules."""
    from nemo_automodel.components.distributed.pipelining.functional import generate_hf_model_fqn_per_model_part

    parts = generate_hf_model_fqn_per_model_part(num_stages, num_layers, include_embeddings=True,
                                                 include_lm_head=True, include_rotary_emb=False,
                                                 include_multimodal_encoders=False)
    return tuple((frozenset(int(m.group(1)) for name in part if (m := LAYER.match(name))),
                  "model.embed_tokens" in part, "lm_head" in part) for part in parts)


def automodel_rank_stages(pp: int, num_stages: int, schedule: str) -> list[tuple[int, ...]]:
    from nemo_automodel.components.distributed.pipelining.functional import stage_ids_this_rank
    from torch.distributed.pipelining.schedules import ScheduleZBVZeroBubble, get_schedule_class

    style = "v" if get_schedule_class(schedule) == ScheduleZBVZeroBubble else "loop"  # as split_model_into_stages
    return [tuple(stage_ids_this_rank(rank, pp, num_stages, style=style)) for rank in range(pp)]


def assert_split_matches(num_layers: int, pp: int, vpp: int, schedule: str) -> None:
    stages = automodel_stages(num_layers, pp * vpp)
    ours = pipeline_split(num_layers, pp, vpp, schedule)
    assert [share.stages for share in ours] == automodel_rank_stages(pp, pp * vpp, schedule)
    for share in ours:
        layers = frozenset(i for start, end in share.layer_spans for i in range(start, end))
        assert layers == frozenset().union(*(stages[s][0] for s in share.stages))
        assert share.num_layers == len(layers)
        assert share.embedding == any(stages[s][1] for s in share.stages)
        assert share.head == any(stages[s][2] for s in share.stages)


def test_every_split_the_planner_can_emit_is_automodels() -> None:
    from nemo_automodel.components.distributed.pipelining.functional import calculate_virtual_stages

    checked = 0
    for layers in LAYER_COUNTS:
        for pp in range(2, min(layers, 64) + 1):
            assert calculate_virtual_stages(layers, None, pp, True) == (pp, 1)
            for schedule in SINGLE:
                assert_split_matches(layers, pp, 1, schedule)
            for vpp in virtual_stage_options(layers, pp, MAX_VPP):
                per_stage = layers_per_stage(layers, pp * vpp)
                assert calculate_virtual_stages(layers, per_stage, pp, False) == (pp * vpp, vpp)
                for schedule in MULTI + (("zbvzerobubble",) if vpp == 2 else ()):
                    assert_split_matches(layers, pp, vpp, schedule)
                checked += 1
    assert checked > 100


def test_known_splits() -> None:
    """61 layers on 4 stages: 16,15,15,15 (the extra layer first); on 32: 2 on ranks 0-28, 1 on 29-31;
    V-style (ZBV) puts stages r and 2pp-1-r on rank r, so rank 0 holds the embedding and the head."""
    assert [s.num_layers for s in pipeline_split(61, 4)] == [16, 15, 15, 15]
    assert [s.num_layers for s in pipeline_split(61, 32)] == [2] * 29 + [1] * 3
    v = pipeline_split(16, 4, 2, "zbvzerobubble")
    assert v[0].stages == (0, 7) and v[0].embedding and v[0].head
    assert not any(s.embedding or s.head for s in v[1:])
    loop = pipeline_split(16, 4, 2, "dualpipev")  # AutoModel loops every schedule but ZBV
    assert loop[0].stages == (0, 4) and loop[3].head


def deepseek_problem(nodes: int = 32) -> Problem:
    model = resolve_model("deepseek-ai/DeepSeek-V3")
    cluster = ClusterSpec(gpu=_gpu("h100"), nodes=nodes, gpus_per_node=8)
    return Problem(model=model, cluster=cluster,
                   training=TrainingSpec(task="pretrain", seq_length=4096, global_batch_size=4096))


def _gpu(name: str):
    from automodel_dist.catalog.hardware import get_gpu

    return get_gpu(name)


PIPELINES = [
    Layout(world_size=256, tp=2, pp=32, ep=8, pp_schedule="1f1b", local_batch_size=64, micro_batch_size=1,
           activation_checkpointing=False),
    Layout(world_size=256, tp=1, pp=4, vpp=4, ep=64, pp_schedule="interleaved1f1b", local_batch_size=64,
           micro_batch_size=1, activation_checkpointing=True),
    Layout(world_size=256, tp=1, pp=8, vpp=2, ep=32, pp_schedule="zbvzerobubble", local_batch_size=32,
           micro_batch_size=2, activation_checkpointing=True),
    Layout(world_size=256, tp=1, pp=16, ep=16, pp_schedule="gpipe", local_batch_size=32, micro_batch_size=1,
           activation_checkpointing=True),
]


@pytest.mark.parametrize("lay", PIPELINES, ids=lambda lay: lay.short())
def test_pruned_ranks_give_the_peak_and_pace_of_every_rank(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rank_loads` keeps only ranks no lower rank outweighs; memory and stage imbalance equal the brute
    force over every rank."""
    problem = deepseek_problem()
    shape = model_shape(problem.model, problem.training)
    pruned = estimate_layout(problem, lay)
    imbalance = throughput.stage_imbalance(shape, lay)
    assert len(memory.rank_loads(shape, lay)) < lay.pp
    monkeypatch.setattr(memory, "rank_loads", memory.every_rank_load)
    monkeypatch.setattr(throughput, "split_loads", memory._every_rank_load)  # stage imbalance over every rank
    throughput._stage_imbalance.cache_clear()
    try:
        brute = estimate_layout(problem, lay)
        brute_imbalance = throughput.stage_imbalance(shape, lay)
    finally:
        throughput._stage_imbalance.cache_clear()  # no every-rank value outlives the patch
    assert pruned.memory_gib == pytest.approx(brute.memory_gib, rel=1e-12)
    assert pruned.memory == pytest.approx(brute.memory, rel=1e-12)
    assert brute_imbalance == pytest.approx(imbalance, rel=1e-12)


def test_deepseek_v3_on_32_stages_peaks_on_a_middle_moe_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """61 layers on pp32: rank 0 holds 2 dense layers and the embedding, rank 31 one MoE layer and the
    head, ranks 2-28 two MoE layers each. Those middle ranks need twice the expert memory: judged on
    ranks 0 and 31 alone this layout needs 78 GiB, with every rank 132 GiB. The
    last rank (one MoE layer and the 0.9B-parameter head) still paces the step."""
    problem = deepseek_problem()
    shape = model_shape(problem.model, problem.training)
    lay = PIPELINES[0]
    loads = {load.rank: load for load in memory.rank_loads(shape, lay)}
    assert (loads[0].dense, loads[0].moe, loads[0].embedding) == (2, 0, True)
    assert (loads[2].dense, loads[2].moe) == (0, 2)
    assert (loads[31].moe, loads[31].head) == (1, True)
    every = estimate_layout(problem, lay)
    attention = shape.attention_flops / shape.num_layers
    moe_layer = shape.moe_layer_flops + shape.moe_expert_flops + attention
    total = (shape.dense_layers * (shape.dense_layer_flops + attention) + shape.moe_layers * moe_layer
             + shape.lm_head_flops)
    assert throughput.stage_imbalance(shape, lay) == pytest.approx(
        (moe_layer + shape.lm_head_flops) * 32 / total, rel=1e-12)

    def ends_only(shape, layout):
        return tuple(load for load in memory.every_rank_load(shape, layout) if load.rank in (0, layout.pp - 1))

    monkeypatch.setattr(memory, "rank_loads", ends_only)
    ends = estimate_layout(problem, lay)
    assert not every.fits
    assert every.memory_gib > 1.6 * ends.memory_gib


@pytest.mark.parametrize("lay", PIPELINES, ids=lambda lay: lay.short())
def test_memory_by_pp_rank_lists_every_rank_and_its_peak_is_the_estimates(lay: Layout) -> None:
    """The per-stage view (the HTML report's bars) and the estimate are one computation: every pp rank in
    order, with the layers AutoModel's split gives it, and the largest total is the estimate's peak."""
    problem = deepseek_problem()
    by_rank = memory_by_pp_rank(problem, lay)
    assert [load.rank for load, _ in by_rank] == list(range(lay.pp))
    assert sum(load.dense + load.moe for load, _ in by_rank) == problem.model.num_layers
    peak = max(by_rank, key=lambda pair: sum(pair[1].values()))[1]
    assert peak == pytest.approx(estimate_layout(problem, lay).memory, rel=1e-12)
