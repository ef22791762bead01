"""`explain`: the winner and the next layouts side by side, and the rule that pruned each dropped layout."""

from __future__ import annotations

import json
from typing import Any

import pytest

from automodel_dist.cli import main
from automodel_dist.compiler import compile_intent
from automodel_dist.explain import render_explain

INTENT = {"model": "Qwen/Qwen3-30B-A3B", "hardware": {"gpu": "h100-80gb", "nodes": 2},
          "training": {"task": "sft", "seq_length": 4096, "global_batch_size": 512}}


def test_text_shows_the_winner_runners_up_and_pruning() -> None:
    result = compile_intent(INTENT)
    text = render_explain(result, top=3, fmt="text")
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#  "))
    rows = lines[header + 1:header + 5]
    assert rows[0].startswith("1*") and result.layout.short() in rows[0]
    assert [r.split()[0] for r in rows[1:]] == ["2", "3", "4"]
    for row, alt in zip(rows[1:], result.alternatives[:3], strict=True):
        assert alt.layout.short() in row and f"{alt.estimate.memory_gib:.1f}" in row and alt.estimate.bound in row
    assert f"{result.considered} layouts considered" in text
    assert any(line.startswith("why: ") for line in lines)
    for rule, count in result.pruned.items():
        assert any(rule in line and str(count) in line for line in lines)


def test_json_carries_the_same_facts() -> None:
    result = compile_intent(INTENT)
    data = json.loads(render_explain(result, top=5, fmt="json"))
    assert data["winner"]["label"] == result.layout.short()
    assert data["winner"]["estimate"]["memory_gib"] == result.estimate.memory_gib
    assert [a["label"] for a in data["alternatives"]] == [c.layout.short() for c in result.alternatives[:5]]
    assert data["pruned"] == result.pruned and data["considered"] == result.considered
    assert set(data["pruned_examples"]) == set(result.pruned)


def test_a_layout_breaking_several_rules_is_dropped_once() -> None:
    """`pruned` counts a layout under each rule it broke; the headlines count layouts (text, JSON, HTML)."""
    from automodel_dist.explain import explain_json
    from automodel_dist.html_report.ranking import ranking_view
    from automodel_dist.planner import plan

    result = compile_intent(INTENT)
    dropped = plan(result.problem).dropped
    assert result.dropped_count == len(dropped) == len({layout for layout, _ in dropped})
    assert result.dropped_count < sum(result.pruned.values())  # this intent has layouts breaking several rules
    assert result.dropped_count + result.feasible <= result.considered
    assert f"{result.considered} layouts considered: {result.dropped_count} dropped by rules" in render_explain(
        result, top=3)
    data = explain_json(result, top=3)
    assert data["dropped"] == result.dropped_count
    assert f"{result.dropped_count:,} dropped by rules" in ranking_view(data, "why", "legend")


def test_cli_explain(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "intent.yaml"
    path.write_text("model: Qwen/Qwen3-8B\nhardware: {gpu: h100-80gb, nodes: 1}\n"
                    "training: {seq_length: 4096, global_batch_size: 64}\n", encoding="utf-8")
    assert main(["explain", str(path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n1*") == 1 and "\n3 " in out and "\n4 " not in out


def test_a_memory_tie_won_by_simplicity_is_not_called_the_lowest() -> None:
    # The winner is the simplest layout within 1% of the lowest peak and #2 needs less memory than it:
    # "lowest peak memory" would be false. (#2 here is the winner with one more parallel dimension.)
    from dataclasses import replace

    from automodel_dist.planner import Candidate

    result = compile_intent({**INTENT, "objective": "memory"})
    rival = Candidate(result.layout.with_(dp_replicate=2),
                      replace(result.estimate, memory_gib=result.estimate.memory_gib * 0.995))
    tied = replace(result, alternatives=[rival])
    why = next(line for line in render_explain(tied, top=1).splitlines() if line.startswith("why: "))
    assert why.startswith("why: ties with #2 within 1% of peak memory; the simpler layout wins"), why


def test_explain_quotes_the_cross_validated_error_and_marks_a_tie_inside_it() -> None:
    """The band is the fitted model's cross-validated median error over measured AutoModel rows like this
    problem; a winner whose margin over #2 is smaller is called a tie."""
    from dataclasses import replace

    from automodel_dist.cost.profiles import ErrorBand
    from automodel_dist.explain import error_band, within_band

    result = compile_intent(INTENT)
    band = error_band(result)
    assert band is not None and band.rows >= 5 and band.group.startswith("automodel/")
    text = render_explain(result, top=2)
    assert f"off by {band.median_abs_error:.0%}" in text and band.group in text
    margin = result.estimate.tokens_per_s_per_gpu / result.alternatives[0].estimate.tokens_per_s_per_gpu - 1
    assert within_band(result, band) == (margin < band.median_abs_error)
    assert within_band(result, replace(band, median_abs_error=margin + 0.01))
    assert within_band(result, ErrorBand(median_abs_error=0.0, rows=9, group="x")) == (margin < 0)
    assert ("tie: the winner's margin" in text) == within_band(result, band)
    assert json.loads(render_explain(result, top=1, fmt="json"))["error_band"]["rows"] == band.rows


def test_explain_quotes_how_measured_peaks_compared_with_their_estimates() -> None:
    """The memory band: rows of the stack whose accounting the estimate uses, the winner's peak at its high end."""
    from automodel_dist.explain import memory_band

    result = compile_intent(INTENT)
    band, thin = memory_band(result)
    assert band is not None and band.rows >= 5 and thin is None
    line = next(x for x in render_explain(result, top=1).splitlines() if x.startswith("memory error: "))
    assert f"({band.group}, {band.rows} runs) were {band.low:+.0%} to {band.high:+.0%}" in line
    assert f"would be {result.estimate.memory_gib * (1 + band.high):.1f} of " in line
    data = json.loads(render_explain(result, top=1, fmt="json"))
    assert data["memory_error_band"] == {"low": band.low, "high": band.high, "rows": band.rows,
                                         "median_abs_error": band.median_abs_error, "group": band.group}
    assert data["memory_error_band_closest"] is None
    assert "over; memory_headroom" not in line  # this winner fits even at the band's high end


def test_a_winner_over_the_gpu_at_the_memory_band_s_high_end_is_told_the_headroom_that_plans_for_it(monkeypatch):
    """The suggested headroom is the least (to the hundredth) under which the re-planned winner, raised by the band's
    high end, stays within the GPU."""
    from automodel_dist import explain
    from automodel_dist.cost.profiles import MemoryBand

    result = compile_intent(INTENT)
    high = result.problem.cluster.gpu.hbm_gib / result.estimate.memory_gib - 1 + 0.05  # 5 points past the GPU
    monkeypatch.setattr(explain, "memory_band", lambda _: (MemoryBand(-0.1, high, 0.05, 9, "x/*"), None))
    line = next(x for x in render_explain(result, top=1).splitlines() if x.startswith("memory error: "))
    headroom = float(line.rsplit("memory_headroom: ", 1)[1].split()[0])
    assert headroom >= high / (1 + high) and headroom - high / (1 + high) < 0.01
    replanned = compile_intent({**INTENT, "memory_headroom": headroom})
    assert replanned.estimate.memory_gib * (1 + high) <= replanned.problem.cluster.gpu.hbm_gib


def test_explain_shows_the_step_time_part_by_part_against_the_runner_up() -> None:
    result = compile_intent(INTENT)
    second = result.alternatives[0].estimate
    data = json.loads(render_explain(result, top=2, fmt="json"))
    gains = data["advantage_over_runner_up_s"]
    assert sum(gains.values()) == pytest.approx(second.step_time_s - result.estimate.step_time_s, rel=1e-9)
    text = render_explain(result, top=2)
    table = text.split("step time by part against #2", 1)[1].split("\n\n", 1)[0]
    for part, gain in gains.items():
        if result.estimate.time[part] or second.time[part]:
            assert f"{gain:+.3f}" in table and part in table


def _checkpointing_line(result: Any) -> str:
    text = render_explain(result, top=3, fmt="text")
    return next(line for line in text.splitlines() if line.startswith(f"{result.checkpointing_term}: "))


def test_the_checkpointing_twins_are_the_modes_searched_and_the_rest_say_why_not() -> None:
    """explain compares the winner with its structure under the other checkpointing modes the planner searched,
    and says of a mode it did not search that it did not (not "no fitting split"), with the reason."""
    searched = compile_intent(INTENT)  # fsdp2, nothing pinned: every mode searched
    assert searched.unsearched_checkpointing() == {}
    assert "not searched" not in _checkpointing_line(searched)

    pinned = compile_intent({**INTENT, "parallelism": {"activation_checkpointing": "full"}})
    assert set(pinned.unsearched_checkpointing()) == {"selective", "off"}
    line = _checkpointing_line(pinned)
    assert "selective: not searched (the intent pins parallelism.activation_checkpointing)" in line
    assert "no fitting split" not in line
    data = json.loads(render_explain(pinned, top=3, fmt="json"))["checkpointing"]
    assert data["same_structure"] == {} and set(data["not_searched"]) == {"selective", "off"}

    mfsdp = compile_intent({**INTENT, "model": "Qwen/Qwen3-8B", "parallelism": {"strategy": "megatron_fsdp"}})
    assert set(mfsdp.unsearched_checkpointing()) == {"full", "selective"}
    assert "full: not searched (AutoModel skips activation checkpointing with MegatronFSDP on more than one GPU)" \
        in _checkpointing_line(mfsdp)


def test_megatron_bridge_explain_says_full_recompute_was_not_searched() -> None:
    """The megatron-bridge target searches selective recompute or none: its explain does not call full recompute
    unfit; pinned (a dense model: the MoE graphs refuse full recompute), full is searched and the rest are not."""
    from automodel_dist.targets.megatron_bridge.compile import compile_megatron

    text = ("model: Qwen/Qwen3-30B-A3B\nhardware: {gpu: h100-80gb, nodes: 2}\n"
            "training: {task: pretrain, seq_length: 4096, global_batch_size: 512}\n")
    result = compile_megatron(text)
    assert set(result.unsearched_checkpointing()) == {"full"}
    line = _checkpointing_line(result)
    assert "full: not searched (the megatron-bridge target searches selective recompute or none; full recompute " \
           "only when pinned)" in line
    assert "full: no fitting split" not in line
    dense = text.replace("Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-8B")  # no MoE graph to refuse full recompute
    pinned = compile_megatron(dense + "parallelism: {activation_checkpointing: full}\n")
    assert pinned.layout.activation_checkpointing == "full"
    assert set(pinned.unsearched_checkpointing()) == {"selective", "off"}
