"""`explain --target megatron-bridge --html`: the four views with the Megatron cost profile's numbers, the
override set with every value's reason, and the rank map in Megatron Core's rank order; marked `browser`,
the page as headless Chromium renders it."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from test_html_report import HOSTILE, VIEW_IDS, Dom, _chromium, _run_chromium, assert_rendered_page

from automodel_dist.cli import main
from automodel_dist.compiler import compile_intent
from automodel_dist.html_report import from_compile, render_page
from automodel_dist.html_report.ranking import seconds
from automodel_dist.targets.megatron_bridge.compile import MegatronCompileResult
from automodel_dist.targets.megatron_bridge.ranks import plan_ranks

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
QWEN = EXAMPLES / "qwen3-30b-a3b-16xh100.yaml"
DSV3 = EXAMPLES / "deepseek-v3-1024xh100.yaml"


@pytest.fixture(scope="module")
def qwen() -> MegatronCompileResult:
    result = compile_intent(QWEN, ["training.task=pretrain"], target="megatron-bridge")
    assert isinstance(result, MegatronCompileResult)
    return result


@pytest.fixture(scope="module")
def dsv3() -> MegatronCompileResult:
    result = compile_intent(DSV3, target="megatron-bridge")
    assert isinstance(result, MegatronCompileResult)
    return result


def _explain_html(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    out = tmp_path / "report.html"
    assert main(["explain", *args, "--target", "megatron-bridge", "--html", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"wrote {out}" in stderr
    return out.read_text(encoding="utf-8"), stdout


def test_the_report_has_the_four_views_and_the_override_set(tmp_path: Path, qwen: MegatronCompileResult,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    text, stdout = _explain_html(tmp_path, capsys, str(QWEN), "training.task=pretrain")
    assert "qwen3_30b_a3b_pretrain_config, each value and why" in stdout  # the text explanation still prints
    dom = Dom(text)
    assert dom.section_order == [*VIEW_IDS, "settings"]
    assert {a["href"] for a in dom.tags("a")} >= {f"#{view}" for view in [*VIEW_IDS, "settings"]}
    est = qwen.estimate
    ranking = dom.sections["ranking"]
    for figure in (qwen.layout.short(), f"{est.memory_gib:.1f} GiB", seconds(est.step_time_s),
                   f"{est.tokens_per_s_per_gpu:,.0f}", est.bound):
        assert figure in ranking
    assert len(re.findall(r"TP\d+ PP\d+ ", ranking)) == 1 + min(10, len(qwen.alternatives))  # Megatron terms
    for automodel_term in ("distributed_optimizer", "dpr1", "noac", "lbs", "FSDP"):
        assert automodel_term not in text
    assert "DP comm" in dom.sections["step-time"] and "Layout labels in Megatron's terms" in ranking
    assert "writes Megatron-Bridge overrides for qwen3_30b_a3b_pretrain_config" in text
    settings = dom.sections["settings"]
    assert "Megatron-Bridge overrides for qwen3_30b_a3b_pretrain_config" in settings
    for pair in qwen.hydra:  # every key=value of the override set, with its value as Hydra writes it
        path, value = pair.split("=", 1)
        assert path in settings and value in settings
    assert "every prerequisite holds" in settings  # a why, as the YAML's comment says it
    for name, value, _ in qwen.env:
        assert name in settings and value in settings


def test_the_rank_map_is_megatrons(tmp_path: Path, qwen: MegatronCompileResult,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-30B-A3B pretrain on 16 H100: ep16 folded over dp16: EP and DP panels, Megatron's names."""
    text, _ = _explain_html(tmp_path, capsys, str(QWEN), "training.task=pretrain")
    dom = Dom(text)
    rank_map = dom.sections["rank-map"]
    assert [a["data-axis"] for a in dom.tags("figure", **{"class": "panel"})] == ["ep", "dp"]
    assert "Megatron Core's rank order tp-cp-ep-dp-pp" in rank_map
    assert "Every axis Megatron Core asks a group of" in rank_map
    assert len(dom.tags("rect", **{"class": "cell"})) == 2 * qwen.problem.cluster.world_size


def test_stage_bars_are_the_megatron_profiles_ranks(dsv3: MegatronCompileResult) -> None:
    """One bar per pp rank, from the Megatron cost profile: the largest is the winner's estimated peak."""
    data = from_compile(dsv3, top=10)
    assert dsv3.layout.pp > 1
    assert [s.rank for s in data.stages] == list(range(dsv3.layout.pp))
    assert max(s.total_gib for s in data.stages) == pytest.approx(dsv3.estimate.memory_gib, rel=1e-12)


def test_the_rank_groups_follow_megatrons_order(dsv3: MegatronCompileResult) -> None:
    """tp fastest, then cp, dp, pp; experts fold (expert dp, ep, etp) inside each stage."""
    plan = plan_ranks(dsv3.layout)
    lay = dsv3.layout
    assert plan.group_of("tp", 0) == list(range(lay.tp))
    assert plan.group_of("dp", 0) == list(range(0, lay.world_size // lay.pp, lay.tp * lay.cp))
    assert plan.group_of("pp", 0) == list(range(0, lay.world_size, lay.world_size // lay.pp))
    assert plan.group_of("ep", 0) == list(range(lay.ep))
    assert len(plan.group_of("ep_shard", 0)) == lay.ep_shard


def test_same_intent_same_bytes_and_user_text_is_escaped(qwen: MegatronCompileResult) -> None:
    again = compile_intent(QWEN, ["training.task=pretrain"], target="megatron-bridge")
    data = from_compile(qwen, top=10)
    assert render_page(data) == render_page(from_compile(again, top=10))
    hostile = render_page(replace(data, settings=((HOSTILE, HOSTILE, HOSTILE),), environment=((HOSTILE, "1", "x"),)))
    dom = Dom(hostile)
    assert "<img" not in hostile and dom.section_order == [*VIEW_IDS, "settings"]
    assert dom.sections["settings"].count(HOSTILE) == 4


def test_an_automodel_report_has_no_settings_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "am.html"
    assert main(["explain", str(QWEN), "--html", str(out)]) == 0
    dom = Dom(out.read_text(encoding="utf-8"))
    assert dom.section_order == VIEW_IDS
    assert "Every axis AutoModel asks a group of" in dom.sections["rank-map"]


@pytest.mark.browser
def test_chromium_renders_the_megatron_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = _chromium()
    report = tmp_path / "report.html"
    assert main(["explain", str(DSV3), "--target", "megatron-bridge", "--html", str(report)]) == 0
    url = report.as_uri()
    dumped = _run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Dom(dumped.stdout)
    assert dom.section_order == [*VIEW_IDS, "settings"]
    assert len(dom.tags("svg")) >= 3 and dom.tags("figure", **{"class": "panel"})
    assert "pipeline_model_parallel_layout" in dom.sections["settings"]
    assert_rendered_page(binary, tmp_path, url)
