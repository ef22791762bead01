"""The HTML report of `explain --html` and `dry-run --html`: its four views, parsed as a DOM; the winner's
numbers; self-containment (nothing to fetch, nothing to run); escaping of user-given names; determinism;
the size of a large world's report; and, marked `browser`, the page as headless Chromium renders it."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from png_reader import read_png

from automodel_dist.cli import main
from automodel_dist.compiler import CompileResult, compile_intent
from automodel_dist.html_report import VIEWS, from_compile, render_page
from automodel_dist.html_report.rank_map import HEAD_NODES, TAIL_NODES
from automodel_dist.html_report.ranking import seconds
from automodel_dist.html_report.svg import nice_step
from automodel_dist.html_report.svg import text as svg_text

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "examples/intents/qwen3-30b-a3b-16xh100.yaml"
LARGE = ROOT / "examples/intents/deepseek-v3-1024xh100.yaml"
VIEW_IDS = [view_id for view_id, _ in VIEWS]
HOSTILE = "<img src=x onerror=alert(1)>&\"q' <section id=ranking>"
# A large world's report stays small: 1024 GPUs fit in this many bytes.
LARGE_REPORT_BYTES = 200_000


class Dom(HTMLParser):
    """Every element (tag, attributes), every text node, the title, and the text inside each section by id."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.sections: dict[str, str] = {}
        self.section_order: list[str] = []
        self.chunks: list[str] = []
        self.title = ""
        self._open: list[str] = []
        self._tag = ""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.elements.append((tag, attributes))
        self._tag = tag
        if tag == "section":
            section = attributes.get("id") or ""
            self._open.append(section)
            self.section_order.append(section)
            self.sections[section] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)
        if self._tag == "title" and not self.title:
            self.title = data
        for section in self._open:
            self.sections[section] += data

    def tags(self, name: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for tag, a in self.elements if tag == name and all(a.get(k) == v for k, v in attrs.items())]


@pytest.fixture(scope="module")
def small() -> CompileResult:
    return compile_intent(str(SMALL))


@pytest.fixture(scope="module")
def large() -> CompileResult:
    return compile_intent(str(LARGE))


def _explain_html(tmp_path: Path, intent: Path | str, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    out = tmp_path / "report" / "report.html"
    assert main(["explain", str(intent), "--html", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"wrote {out}" in stderr
    return out.read_text(encoding="utf-8"), stdout


def test_explain_html_has_the_four_views_and_the_winners_numbers(tmp_path: Path, small: CompileResult,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    text, stdout = _explain_html(tmp_path, SMALL, capsys)
    assert stdout.startswith(small.problem.model.name)  # the text explanation still goes to stdout
    dom = Dom(text)
    assert dom.section_order[:4] == VIEW_IDS
    est, label = small.estimate, small.layout.short()
    ranking = dom.sections["ranking"]
    for figure in (label, f"{est.memory_gib:.1f} GiB", seconds(est.step_time_s), f"{est.tokens_per_s_per_gpu:,.0f}",
                   f"{est.tflops_per_gpu:.0f}", f"{est.mfu:.0%}", est.bound):
        assert figure in ranking
    for rule, count in small.pruned.items():  # the pruned-rule counts, as explain carries them
        assert rule in ranking and f"{count:,}" in ranking
    assert len(dom.tags("tr", **{"class": "winner"})) == 1
    assert len(small.alternatives) >= 10 and ranking.count("fsdp2 ") == 11  # winner + explain's default top 10
    memory = dom.sections["memory"]
    assert f"HBM {small.problem.cluster.gpu.hbm_gib:g} GiB" in memory and "limit 71.7 GiB (10% free)" in memory
    for group in ("parameters", "gradients", "optimizer", "activations", "buffers"):
        assert group in memory
    step = dom.sections["step-time"]
    assert seconds(est.step_time_s) in step and "EP comm" in step and "compute" in step
    panels = [a["data-axis"] for a in dom.tags("figure", **{"class": "panel"})]
    # qwen3-30b-a3b's winner: ep8 inside each node, dp_shard 8, two pipeline stages across the nodes; tp = cp = 1
    assert panels == ["ep", "dp_shard", "pp"]
    cells = [a for a in dom.tags("rect", **{"class": "cell"})]
    assert len(cells) == len(panels) * small.problem.cluster.world_size


def test_the_report_is_self_contained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing to fetch and nothing to run: no script, no link, no URL but in-page anchors, a CSP that
    forbids every load."""
    text, _ = _explain_html(tmp_path, SMALL, capsys)
    dom = Dom(text)
    assert not dom.tags("script") and not dom.tags("link") and not dom.tags("img") and not dom.tags("iframe")
    for _, attrs in dom.elements:
        assert "src" not in attrs
        assert all(not k.startswith("on") for k in attrs)
        assert (attrs.get("href") or "#").startswith("#")
    assert "url(" not in text and "@import" not in text and "@font-face" not in text
    csp = dom.tags("meta", **{"http-equiv": "Content-Security-Policy"})
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")


def test_same_intent_same_bytes(small: CompileResult) -> None:
    again = compile_intent(str(SMALL))
    assert render_page(from_compile(small, top=10)) == render_page(from_compile(again, top=10))


def test_a_hostile_model_name_is_text_not_markup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The model is named after its folder: markup in it must stay text in every view and in the title."""
    folder = tmp_path / HOSTILE
    folder.mkdir()
    shutil.copy(ROOT / "tests/fixtures/hf_configs/llama-3.2-1b/config.json", folder / "config.json")
    intent = tmp_path / "intent.yaml"
    quoted = HOSTILE.replace("\\", "\\\\").replace('"', '\\"')
    intent.write_text(f'model: "./{quoted}"\nhardware: {{gpu: h100-80gb, nodes: 1, gpus_per_node: 8}}\n'
                      "training: {task: sft, seq_length: 4096, global_batch_size: 32}\n", encoding="utf-8")
    text, stdout = _explain_html(tmp_path, intent, capsys)
    assert stdout.startswith(HOSTILE)  # the model really is named so
    dom = Dom(text)
    assert not dom.tags("img") and "<img" not in text
    assert dom.section_order == [*VIEW_IDS]  # the name's "<section id=ranking>" opened nothing
    assert all(not k.startswith("on") for _, attrs in dom.elements for k in attrs)
    assert HOSTILE in dom.title and dom.chunks.count(f"{HOSTILE} on 8 × h100-80gb") == 1  # the page heading


def test_stage_bars_are_the_cost_models_ranks(large: CompileResult) -> None:
    """One bar per pp rank; the largest is the winner's peak (the estimate explain ranks by)."""
    data = from_compile(large, top=10)
    assert large.layout.pp > 1
    assert [s.rank for s in data.stages] == list(range(large.layout.pp))
    assert sum(s.dense_layers + s.moe_layers for s in data.stages) == large.problem.model.num_layers
    assert max(s.total_gib for s in data.stages) == pytest.approx(large.estimate.memory_gib, rel=1e-12)
    assert data.stages[0].embedding and data.stages[-1].head


def test_a_large_world_is_summarised(tmp_path: Path, large: CompileResult) -> None:
    text = render_page(from_compile(large, top=10))
    assert len(text.encode()) < LARGE_REPORT_BYTES
    dom = Dom(text)
    nodes = large.problem.cluster.nodes
    skipped = nodes - HEAD_NODES - TAIL_NODES
    rank_map = dom.sections["rank-map"]
    assert f"the {skipped} nodes between them are left out" in rank_map
    panels = dom.tags("figure", **{"class": "panel"})
    drawn_per_panel = (HEAD_NODES + TAIL_NODES) * large.problem.cluster.gpus_per_node
    assert len(dom.tags("rect", **{"class": "cell"})) == len(panels) * drawn_per_panel
    assert f"n{nodes - 1}" in dom.chunks and f"n{HEAD_NODES - 1}" in dom.chunks and f"n{HEAD_NODES}" not in dom.chunks


def test_dry_run_html_of_an_intent_draws_the_torch_meshes(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out, intent = tmp_path / "dry.html", tmp_path / "intent.yaml"
    intent.write_text(SMALL.read_text(encoding="utf-8") + "parallelism:\n  ep: 16\n", encoding="utf-8")
    assert main(["dry-run", str(intent), "--html", str(out)]) == 0  # EP 16 spans both nodes
    dom = Dom(out.read_text(encoding="utf-8"))
    assert dom.section_order[:4] == VIEW_IDS and "findings" in dom.section_order
    assert "fake process group" in dom.sections["rank-map"]
    assert "topo-ep-leaves-nvlink" in dom.sections["findings"]


def test_dry_run_html_of_a_recipe_says_why_only_the_rank_map(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dry.html"
    recipe = ROOT / "examples/recipes/llama-3.1-70b-32xh100.yaml"
    assert main(["dry-run", str(recipe), "--nodes", "4", "--html", str(out)]) == 0
    dom = Dom(out.read_text(encoding="utf-8"))
    assert dom.section_order[:4] == VIEW_IDS
    assert "no alternatives to rank" in dom.sections["ranking"]
    for view in ("memory", "step-time"):
        assert "A recipe names no GPU" in dom.sections[view]
    assert dom.tags("figure", **{"class": "panel"})


def test_html_into_a_folder_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(SMALL), "--html", str(tmp_path)]) == 2
    _, err = capsys.readouterr()
    assert "it is a folder" in err and "hint:" in err and "Traceback" not in err


# --- headless Chromium -------------------------------------------------------------------------------------

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")
WINDOW = (1200, 1600)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed: scripts/setup-env.sh installs Debian's chromium package for CI")
    pytest.skip("chromium is not installed (Debian package `chromium`; scripts/setup-env.sh installs it)")


def _run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180, check=False)


@pytest.mark.browser
def test_chromium_renders_the_four_views(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = _chromium()
    report = tmp_path / "report.html"
    assert main(["explain", str(LARGE), "--html", str(report)]) == 0
    url = report.as_uri()
    dumped = _run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Dom(dumped.stdout)
    assert dom.section_order[:4] == VIEW_IDS
    assert len(dom.tags("svg")) >= 3 and dom.tags("figure", **{"class": "panel"})
    assert "deepseek-v3" in dom.sections["ranking"] or "fsdp2" in dom.sections["ranking"]

    assert_rendered_page(binary, tmp_path, url)


def assert_rendered_page(binary: str, tmp_path: Path, url: str) -> None:
    """A WINDOW-sized screenshot of the page is a drawn report: many colours, no blank background, and the
    filled areas in their exact colours (the header, the winner's row, the memory bars' parameters blue)."""
    png = tmp_path / "report.png"
    shot = _run_chromium(binary, tmp_path / "profile-shot", f"--screenshot={png}",
                         f"--window-size={WINDOW[0]},{WINDOW[1]}", url)
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    image = read_png(png.read_bytes())
    assert (image.width, image.height) == WINDOW
    pixels = image.pixels()[:, :3].astype(np.uint32)
    colours, counts = np.unique(pixels[:, 0] << 16 | pixels[:, 1] << 8 | pixels[:, 2], return_counts=True)
    assert len(colours) > 50  # text, charts, the header: not a blank page
    assert counts.max() < 0.8 * len(pixels)  # no single colour (a background) covers the page
    assert {0x1D2430, 0xFFF8E1, 0x4C78A8} <= set(colours.tolist())


@pytest.mark.parametrize(("span", "step"), [(84.0, 20.0), (194.25, 50.0), (10.0, 2.0), (0.3, 0.1), (1.0, 0.2)])
def test_axis_ticks_are_round(span: float, step: float) -> None:
    assert nice_step(span) == pytest.approx(step)


def test_svg_text_is_escaped_and_numbers_fixed() -> None:
    assert svg_text(1.25, 2.0, "<b>&") == '<text x="1.2" y="2" text-anchor="start">&lt;b&gt;&amp;</text>'


def test_html_never_overwrites_the_intent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    intent = tmp_path / "intent.yaml"
    intent.write_text(SMALL.read_text(encoding="utf-8"), encoding="utf-8")
    before = intent.read_bytes()
    assert main(["explain", str(intent), "--html", str(intent), "--force"]) == 2
    assert intent.read_bytes() == before
    assert "Traceback" not in capsys.readouterr().err


def test_a_report_the_tool_wrote_is_replaced_without_force(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["explain", str(SMALL), "--html", str(out)]) == 0
    assert main(["explain", str(SMALL), "--html", str(out)]) == 0
    out.write_text("<html>mine</html>\n", encoding="utf-8")
    assert main(["explain", str(SMALL), "--html", str(out)]) == 2
    assert out.read_text(encoding="utf-8") == "<html>mine</html>\n"
