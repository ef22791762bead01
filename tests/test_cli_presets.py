"""`automodel-dist presets models|hardware`: the tables and the JSON list every preset, with the
figures the catalog computes, the same way twice; a bad argument exits 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from automodel_dist.catalog.hardware import list_gpus
from automodel_dist.catalog.listing import human_count, render_presets
from automodel_dist.catalog.models import list_models
from automodel_dist.catalog.params import param_counts
from automodel_dist.cli import main
from automodel_dist.errors import InputError


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["presets", *argv]) == 0
    return capsys.readouterr().out


def test_models_table_lists_every_preset_with_counts(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "models")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["id", "family", "layers", "hidden"]
    by_id = {line.split()[0]: line for line in lines[2:] if line and not line.startswith(("active", "An "))}
    assert sorted(by_id) == sorted(p.id for p in list_models())
    row = by_id["qwen3-30b-a3b"].split()
    assert row[1:4] == ["qwen3_moe", "48", "2048"]
    assert "128 top-8" in by_id["qwen3-30b-a3b"]
    assert "30.5B" in row and "3.35B" in row
    assert "Qwen/Qwen3-30B-A3B" in by_id["qwen3-30b-a3b"]
    assert "256 top-8 +1 shared" in by_id["deepseek-v3"]
    assert "1.03T" in by_id["kimi-k2"].split()


def test_models_json_matches_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    items = json.loads(_run(capsys, "models", "--format", "json"))
    presets = {p.id: p for p in list_models()}
    assert [item["id"] for item in items] == sorted(presets)
    for item in items:
        preset = presets[item["id"]]
        counts = param_counts(preset.spec)
        assert item["params"]["total"] == counts.total
        assert item["params"]["active"] == counts.active
        assert item["spec"]["num_layers"] == preset.spec.num_layers
        assert item["aliases"] == [a.id for a in preset.aliases]


def test_hardware_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "hardware")
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line and line[0].isalnum()
            and not line.startswith(("TFLOP", "vendor"))}
    assert sorted(rows) == sorted(g.name for g in list_gpus())
    assert rows["h100-80gb"].split()[1:8] == ["79.65", "GiB", "(80", "GB)", "989", "1979", "8"]
    assert rows["a100-80gb"].split()[6] == "-"  # no FP8
    assert rows["gb300-nvl72"].split()[-5:] == ["4", "72", "900", "100", "10.3"]
    items = json.loads(_run(capsys, "hardware", "--format", "json"))
    gb200 = next(i for i in items if i["id"] == "gb200-nvl72")
    assert (gb200["gpus_per_node"], gb200["nvlink_domain"], gb200["hbm_gib"]) == (4, 72, 185.03)
    assert "gb200" in gb200["aliases"]


def test_output_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("models",), ("models", "--format", "json"), ("hardware",), ("hardware", "--format", "json")):
        assert _run(capsys, *argv) == _run(capsys, *argv)


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["presets", "gpsu"], ["presets", "models", "--format", "yaml"], ["presets"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert "invalid choice" in capsys.readouterr().err or argv == ["presets"]


@pytest.mark.parametrize(("argv", "says"), [
    (["presets", "gpsu"], "argument KIND: invalid choice: 'gpsu' (choose from 'models', 'hardware')"),
    (["schema", "intnet"], "argument SCHEMA: invalid choice: 'intnet' (choose from 'intent', 'recipe')"),
])
def test_a_bad_choice_names_the_argument_as_usage_shows_it(argv: list[str], says: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    assert says in err and "argument which" not in err


@pytest.mark.parametrize(("alias", "kind"), [("gpus", "hardware"), ("gpu", "hardware"), ("model", "models")])
def test_obvious_aliases_list_the_same_presets(alias: str, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, alias) == _run(capsys, kind)


def test_render_presets_rejects_unknown_kind_and_format() -> None:
    with pytest.raises(InputError, match="unknown preset kind 'gpus'"):
        render_presets("gpus", "text")
    with pytest.raises(InputError, match="unknown format 'yaml'"):
        render_presets("models", "yaml")


def test_human_count() -> None:
    assert [human_count(n) for n in (8_030_261_248, 70_553_706_496, 1_026_408_232_448, 1.2e9)] == [
        "8.03B", "70.6B", "1.03T", "1.2B"]


def test_cli_as_a_subprocess() -> None:
    done = subprocess.run([sys.executable, "-m", "automodel_dist", "presets", "hardware"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "gb300-nvl72" in done.stdout and done.stderr == ""
