"""`automodel-dist dry-run` end to end: text and JSON output, --rank, node-map warnings, the exit codes for
bad input and failing recipes, intents compiled first, torch missing, and a loud internal mismatch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from automodel_dist.cli import main
from automodel_dist.errors import InputError
from automodel_dist.verify import mesh as mesh_module
from automodel_dist.verify.groups import NON_PP_FLAT_NAME

RECIPE = """\
recipe: TrainFinetuneRecipeForNextTokenPrediction
distributed:
  strategy: fsdp2
  tp_size: {tp}
  cp_size: 2
  pp_size: 2
  ep_size: {ep}
  pipeline: {{}}
"""


def write(tmp_path: Path, text: str, name: str = "recipe.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = write(tmp_path, RECIPE.format(tp=4, ep=8))
    code, out, err = run(["dry-run", recipe, "--nodes", "4", "--rank", "13"], capsys)
    assert code == 0, err
    assert "on 32 ranks (4 nodes × 8 GPUs" in out
    assert "device_mesh  (pp=2, dp_replicate=1, dp_shard=2, cp=2, tp=4)" in out
    assert "moe_mesh     (ep_shard=2, ep=8), one per pipeline stage" in out
    assert "flattened  dp_cp = (dp_replicate, dp_shard, cp)" in out
    # per-axis summary: size, #groups, locality, first groups
    tp_row = next(line for line in out.splitlines() if line.startswith("tp "))
    assert tp_row.split()[:7] == ["tp", "root", "4", "8", "yes", "yes", "1"]
    assert "[0, 1, 2, 3]  [4, 5, 6, 7]" in tp_row
    # rank 13 = (pp 0, dp_replicate 0, dp_shard 1, cp 1, tp 1)
    assert "rank 13 (node 1)" in out
    assert "device_mesh  pp=0 dp_replicate=0 dp_shard=1 cp=1 tp=1" in out
    assert "moe_mesh     ep_shard=1 ep=5" in out
    rank_lines = out.split("rank 13 (node 1)")[1].splitlines()
    assert any(line.split() == ["tp", "[12,", "13,", "14,", "15]"] for line in rank_lines)
    assert any(line.split() == ["dp_shard_cp", "[1,", "5,", "9,", "13]"] for line in rank_lines)
    assert "findings: none" in out
    assert "dry-run took" in err


def test_json_output_carries_every_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = write(tmp_path, RECIPE.format(tp=4, ep=8))
    code, out, _ = run(["dry-run", recipe, "--nodes", "4", "--format", "json", "--rank", "31"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["ok"] and data["world_size"] == 32
    assert data["device_mesh"] == {"names": ["pp", "dp_replicate", "dp_shard", "cp", "tp"], "shape": [2, 1, 2, 2, 4]}
    assert data["moe_mesh"]["shape"] == [2, 8]
    assert set(data["axes"]) == {"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp",
                                 NON_PP_FLAT_NAME, "ep_shard", "ep"}
    for name, axis in data["axes"].items():
        assert sorted(r for g in axis["groups"] for r in g) == list(range(32)), name
        assert axis["num_groups"] == len(axis["groups"]) and axis["size"] == len(axis["groups"][0])
    assert data["axes"]["ep"]["groups"] == [list(range(i, i + 8)) for i in range(0, 32, 8)]
    assert data["rank"]["rank"] == 31 and data["rank"]["groups"]["pp"] == [15, 31]
    assert data["rank"]["coordinates"]["device_mesh"] == {"pp": 1, "dp_replicate": 0, "dp_shard": 1, "cp": 1,
                                                          "tp": 3}
    # deterministic: the same input gives the same bytes
    assert run(["dry-run", recipe, "--nodes", "4", "--format", "json", "--rank", "31"], capsys)[1] == out


def test_node_map_warnings_name_the_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = write(tmp_path, RECIPE.format(tp=16, ep=16))
    code, out, _ = run(["dry-run", recipe, "--nodes", "8", "--format", "json"], capsys)
    assert code == 0  # warnings do not fail a dry-run
    data = json.loads(out)
    findings = {f["rule"]: f for f in data["findings"]}
    tp, ep = findings["topo-tp-crosses-node"], findings["topo-ep-leaves-nvlink"]
    assert tp["severity"] == ep["severity"] == "warning"
    assert "all-reduce/all-gather" in tp["message"] and "inter-node links at ~50 GB/s" in tp["message"]
    assert "all-to-all dispatch and combine cross nodes" in ep["message"]
    assert (tp["line"], tp["col"]) == (4, 3) and (ep["line"], ep["col"]) == (7, 3)
    assert data["axes"]["tp"]["intra_node"] is False and data["axes"]["tp"]["max_nodes_spanned"] == 2
    assert data["axes"]["ep"]["intra_nvlink"] is False


def test_groups_inside_a_node_give_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = write(tmp_path, RECIPE.format(tp=8, ep=8))
    code, out, _ = run(["dry-run", recipe, "--nodes", "8", "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["findings"] == []
    code, out, _ = run(["dry-run", recipe, "--nodes", "16", "--gpus-per-node", "4", "--format", "json"], capsys)
    assert {f["rule"] for f in json.loads(out)["findings"]} == {"topo-tp-crosses-node", "topo-ep-leaves-nvlink"}


def test_recipe_needs_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["dry-run", write(tmp_path, RECIPE.format(tp=1, ep=1))], capsys)
    assert code == 2 and "needs --nodes" in err and "Traceback" not in err


def test_a_recipe_header_states_the_world_as_validate_reads_it(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`# world: 2 x 4` is 8 ranks of 4 per node; a flag replaces its own half only."""
    recipe = write(tmp_path, "# world: 2 x 4\n" + RECIPE.format(tp=1, ep=1))
    code, out, _ = run(["dry-run", recipe, "--format", "json"], capsys)
    report = json.loads(out)
    assert code == 0 and (report["world_size"], report["gpus_per_node"]) == (8, 4)
    code, out, _ = run(["dry-run", recipe, "--nodes", "4", "--format", "json"], capsys)
    assert code == 0 and (json.loads(out)["world_size"], json.loads(out)["gpus_per_node"]) == (16, 4)
    bad = write(tmp_path, "# World: 2 nodes\n" + RECIPE.format(tp=1, ep=1), name="bad.yaml")
    code, _, err = run(["dry-run", bad], capsys)
    assert code == 2 and "bad.yaml:1:1: the `# world:` header line says '2 nodes'" in err


def test_rank_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["dry-run", write(tmp_path, RECIPE.format(tp=1, ep=1)), "--nodes", "2", "--rank", "16"],
                         capsys)
    assert code == 2 and out == ""
    assert "--rank 16 is outside the world of 16 ranks (valid: 0 to 15)" in err


def test_rule_errors_exit_1_with_automodel_wording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = write(tmp_path, "recipe: X\ndistributed:\n  strategy: fsdp2\n  tp_size: 2\n  ep_size: 3\n")
    code, out, _ = run(["dry-run", recipe, "--nodes", "1"], capsys)
    assert code == 1
    assert "the meshes cannot be built" in out
    assert "AutoModel says: non_pp_size=8 must be a multiple of ep_size=3" in out
    assert f"{recipe}:5:3 (distributed.ep_size)" in out
    code, out, _ = run(["dry-run", recipe, "--nodes", "1", "--format", "json"], capsys)
    data = json.loads(out)
    assert code == 1 and not data["ok"] and not data["built"] and data["axes"] == {}
    assert [f["rule"] for f in data["findings"]] == ["am-r13-ep-divides-non-pp"]


def test_batch_rules_are_validates_business(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A global batch that does not divide is validate's error; the meshes still build."""
    recipe = write(tmp_path, RECIPE.format(tp=1, ep=1) + "step_scheduler:\n  global_batch_size: 7\n")
    code, out, _ = run(["dry-run", recipe, "--nodes", "1", "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["findings"] == []


def test_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["dry-run", str(tmp_path / "missing.yaml"), "--nodes", "1"], capsys)
    assert code == 2 and "not found" in err
    recipe = write(tmp_path, "recipe: X\ndistributed:\n  tp_size: [2]\n")
    code, _, err = run(["dry-run", recipe, "--nodes", "1"], capsys)
    assert code == 2 and "tp_size" in err and "Traceback" not in err
    recipe = write(tmp_path, "recipe: X\ndistributed:\n  tp_size: ${MESH_TEST_UNSET_TP}\n")
    code, _, err = run(["dry-run", recipe, "--nodes", "1"], capsys)
    assert code == 2 and f"{recipe}:3:3: Environment variable 'MESH_TEST_UNSET_TP' is not set" in err


INTENT = """\
model: Qwen/Qwen3-30B-A3B
hardware:
  gpu: h100-80gb
  nodes: 2
training:
  seq_length: 4096
  global_batch_size: 64
parallelism:
  strategy: fsdp2
  tp: 1
  pp: 1
  cp: 1
  ep: 16
"""


def test_intent_is_compiled_then_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    intent = write(tmp_path, INTENT, "intent.yaml")
    code, out, err = run(["dry-run", intent, "--format", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["world_size"] == 16 and data["moe_mesh"]["shape"] == [1, 16]
    warning = next(f for f in data["findings"] if f["rule"] == "topo-ep-leaves-nvlink")
    assert "(h100-80gb)" in warning["message"]  # the intent's GPU names the link speeds
    code, out, _ = run(["dry-run", intent, "--nodes", "4", "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["world_size"] == 32
    code, _, err = run(["dry-run", intent, "--rank", "16"], capsys)
    assert code == 2 and "outside the world of 16 ranks" in err


def test_torch_missing_is_one_line_exit_2(tmp_path: Path) -> None:
    recipe = write(tmp_path, RECIPE.format(tp=1, ep=1))
    script = ("import sys; sys.modules['torch'] = None\n"
              "from automodel_dist.cli import main\n"
              f"sys.exit(main(['dry-run', {recipe!r}, '--nodes', '1']))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "pip install 'automodel-dist[dryrun]'" in proc.stderr and "torch==2.13.0" in proc.stderr


def test_package_imports_without_torch() -> None:
    script = ("import sys; sys.modules['torch'] = None\n"
              "import automodel_dist.verify.mesh, automodel_dist.verify.render, automodel_dist.verify.cli\n"
              "import automodel_dist.verify.groups, automodel_dist.verify.torch_build\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_torch_disagreeing_with_the_arithmetic_is_loud(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = mesh_module.build_with_torch

    def tampered(plan):
        built = real(plan)
        built.tables["tp"][0] = list(reversed(built.tables["tp"][0]))
        return built

    monkeypatch.setattr(mesh_module, "build_with_torch", tampered)
    code, out, err = run(["dry-run", write(tmp_path, RECIPE.format(tp=4, ep=1)), "--nodes", "2"], capsys)
    assert code == 1 and out == ""
    assert "internal error" in err and "the groups of axis 'tp'" in err
    assert mesh_module.MeshMismatchError.exit_code == 1


def test_ddp_and_megatron(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddp = write(tmp_path, "recipe: X\ndistributed:\n  strategy: ddp\n", "ddp.yaml")
    code, out, _ = run(["dry-run", ddp, "--nodes", "2"], capsys)
    assert code == 0 and "nothing to build: AutoModel builds no device mesh for DDP" in out
    data = json.loads(run(["dry-run", ddp, "--nodes", "2", "--format", "json"], capsys)[1])
    assert data["ok"] and data["device_mesh"] is None and data["axes"] == {}
    megatron = write(tmp_path, "recipe: X\ndistributed:\n  strategy: mfsdp\n  tp_size: 4\n  cp_size: 2\n", "m.yaml")
    data = json.loads(run(["dry-run", megatron, "--nodes", "2", "--format", "json", "--rank", "9"], capsys)[1])
    assert data["device_mesh"] == {"names": ["dp", "cp", "tp"], "shape": [2, 2, 4]}
    assert data["flattened"] == {"dp_cp": ["dp", "cp"]} and data["moe_mesh"] is None
    assert data["rank"]["groups"] == {"dp": [1, 9], "cp": [9, 13], "tp": [8, 9, 10, 11], "dp_cp": [1, 5, 9, 13]}


def test_public_api_takes_yaml_text() -> None:
    import automodel_dist as ad

    report = ad.build_meshes(RECIPE.format(tp=2, ep=4), world_size=16, gpus_per_node=8)
    assert report.ok and report.mesh_shape == (2, 1, 2, 2, 2) and report.moe_shape == (2, 4)
    assert report.rank_view(15).groups["ep"] == [12, 13, 14, 15]
    assert report.node_map["tp"].intra_node and not report.node_map["pp"].intra_node
    assert {"import_torch", "torch_build", "total"} <= set(report.timing)


@pytest.mark.parametrize(("world_size", "gpus_per_node", "named"), [(0, 8, "world size"), (8, 0, "GPUs per node"),
                                                                    (True, 8, "world size")])
def test_api_refuses_sizes_validate_refuses(world_size: int, gpus_per_node: int, named: str) -> None:
    with pytest.raises(InputError, match=f"{named} must be a positive integer") as caught:
        mesh_module.build_meshes(RECIPE.format(tp=1, ep=1), world_size=world_size, gpus_per_node=gpus_per_node)
    assert caught.value.hint


def test_an_existing_process_group_is_not_clobbered() -> None:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
    try:
        with pytest.raises(InputError, match="already initialised"):
            mesh_module.build_meshes(RECIPE.format(tp=1, ep=1), world_size=8)
        assert dist.get_world_size() == 4
    finally:
        dist.destroy_process_group()
