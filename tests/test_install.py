"""A new user's install: the wheel, in a fresh venv, used from a folder outside the checkout.

The presets and schemas are package data; a wheel that forgot them would list no models (exit 0) and
crash on the first schema check, so each command is run for real and its output compared with the
checkout's. The venv installs the wheel and its runtime dependencies from the package index like a user's
`pip install` does (no torch: dry-run says how to get it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fresh_install import build_wheel, install, make_venv

from automodel_dist.catalog.hardware import gpu_presets
from automodel_dist.catalog.models import list_models
from automodel_dist.compiler import compile_intent

ROOT = Path(__file__).resolve().parent.parent
INTENT = ROOT / "examples" / "intents" / "qwen3-30b-a3b-16xh100.yaml"


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin` folder of a fresh venv with the wheel built from this checkout."""
    work = tmp_path_factory.mktemp("install")
    bin_dir = make_venv(work)
    install(bin_dir, build_wheel(work))
    return bin_dir


@pytest.fixture()
def elsewhere(tmp_path: Path) -> Path:
    """A working folder outside the checkout, holding only a copy of one example intent."""
    shutil.copy(INTENT, tmp_path / "intent.yaml")
    return tmp_path


def test_the_wheel_is_not_the_checkout(installed: Path) -> None:
    found = _run([str(installed / "python"), "-c", "import automodel_dist, sys; print(automodel_dist.__file__)"],
                 cwd=installed)
    assert found.returncode == 0, found.stderr
    assert not Path(found.stdout.strip()).is_relative_to(ROOT)


def test_compile_and_explain_work_outside_the_checkout(installed: Path, elsewhere: Path) -> None:
    compiled = _run([str(installed / "automodel-dist"), "compile", "intent.yaml", "-o", "out/recipe.yaml"],
                    cwd=elsewhere)
    assert compiled.returncode == 0, compiled.stderr
    assert (elsewhere / "out" / "recipe.yaml").read_text(encoding="utf-8") == compile_intent(INTENT).yaml
    explained = _run([str(installed / "automodel-dist"), "explain", "intent.yaml", "--top", "2"], cwd=elsewhere)
    assert explained.returncode == 0, explained.stderr
    assert "winner:" in explained.stdout


def test_validate_judges_with_the_shipped_schema(installed: Path, elsewhere: Path) -> None:
    recipe = elsewhere / "recipe.yaml"
    recipe.write_text(compile_intent(INTENT).yaml, encoding="utf-8")
    ok = _run([str(installed / "automodel-dist"), "validate", "recipe.yaml", "--nodes", "2"], cwd=elsewhere)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    recipe.write_text("distributed:\n  strategy: fsdp3\n", encoding="utf-8")
    bad = _run([str(installed / "automodel-dist"), "validate", "recipe.yaml"], cwd=elsewhere)
    assert bad.returncode == 1 and "recipe.yaml:2:" in bad.stdout and "Traceback" not in bad.stderr


def test_presets_list_every_shipped_preset(installed: Path, elsewhere: Path) -> None:
    for which, ids in (("models", [p.id for p in list_models()]), ("hardware", [p.spec.name for p in gpu_presets()])):
        listed = _run([str(installed / "automodel-dist"), "presets", which, "--format", "json"], cwd=elsewhere)
        assert listed.returncode == 0, listed.stderr
        assert sorted(row["id"] for row in json.loads(listed.stdout)) == sorted(ids)


def test_schema_prints_and_writes_the_shipped_files(installed: Path, elsewhere: Path) -> None:
    shown = _run([str(installed / "automodel-dist"), "schema", "intent"], cwd=elsewhere)
    assert shown.returncode == 0 and json.loads(shown.stdout)["title"]
    written = _run([str(installed / "automodel-dist"), "schema", "--write", "editor-schemas"], cwd=elsewhere)
    assert written.returncode == 0, written.stderr
    for name in ("intent.schema.json", "automodel-recipe.schema.json"):
        shipped = (ROOT / "automodel_dist" / "data" / "schemas" / name).read_text(encoding="utf-8")
        assert (elsewhere / "editor-schemas" / name).read_text(encoding="utf-8") == shipped


def test_dry_run_without_torch_says_how_to_get_it(installed: Path, elsewhere: Path) -> None:
    env = {**os.environ, "PYTHONPATH": ""}
    (elsewhere / "recipe.yaml").write_text(compile_intent(INTENT).yaml, encoding="utf-8")
    out = _run([str(installed / "automodel-dist"), "dry-run", "recipe.yaml", "--nodes", "2"], cwd=elsewhere, env=env)
    assert out.returncode == 2 and "torch" in out.stderr and "Traceback" not in out.stderr
