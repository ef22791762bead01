"""The pre-commit hook, run by pre-commit itself (`try-repo`) on a project with recipes, like a user's commit.

pre-commit installs this checkout into its own environment (so the hook also proves the package data ships),
picks the files the hook's `files` pattern matches and runs `automodel-dist validate` on them, each recipe at
the world its `# world:` header states.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "recipes" / "qwen3-30b-a3b-16xh100.yaml"


def test_the_manifest_declares_one_python_hook_running_validate() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert [h["id"] for h in hooks] == ["automodel-dist-validate"]
    assert hooks[0]["entry"] == "automodel-dist validate" and hooks[0]["language"] == "python"


def test_pre_commit_runs_the_hook_on_the_recipes_only(tmp_path: Path) -> None:
    assert (ROOT / ".git").exists(), "pre-commit try-repo needs this checkout to be a git repository"
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    # A 16-GPU recipe: its header says 2 x 8, so it passes without flags (ep 16 would not fit one node).
    shutil.copy(EXAMPLE, project / "recipes" / "moe.yaml")
    (project / "train.recipe.yaml").write_text("# world: 1 x 8\ndistributed:\n  strategy: fsdp2\n  tp_size: 3\n",
                                               encoding="utf-8")
    (project / "config.yaml").write_text("distributed: [not, a, recipe]\n", encoding="utf-8")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "automodel-dist-validate",
                           "--all-files", "--verbose"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "recipes/moe.yaml: OK" in out
    assert "train.recipe.yaml:2:1: error [am-r9-world-divisible]" in out
    assert "config.yaml" not in out.replace("train.recipe.yaml", "")
