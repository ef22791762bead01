"""A new user's install, timed: build the wheel, make a fresh venv, install the wheel (its dependencies come
from the package index), then run each command once from a folder outside the checkout.

    .venv/bin/python benchmarks/fresh_install.py

Prints seconds per step, the venv's size and each command's exit code; exits 1 if a command fails.
tests/test_install.py runs the same install and checks the outputs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
INTENT = ROOT / "examples" / "intents" / "qwen3-30b-a3b-16xh100.yaml"


def build_wheel(work: Path) -> Path:
    """The wheel of this checkout, built from a copy (the checkout gets no build/ or egg-info)."""
    src = work / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "automodel_dist", src / "automodel_dist", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = work / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(src)], check=True, capture_output=True, timeout=600)
    return next(wheels.glob("automodel_dist-*.whl"))


def make_venv(work: Path) -> Path:
    """A fresh venv's `bin` folder (nothing from this checkout's environment)."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return venv / "bin"


def install(bin_dir: Path, wheel: Path) -> None:
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True, timeout=900)


def _timed(step: str, action: Callable[..., T], *args: Any) -> T:
    start = time.perf_counter()
    result = action(*args)
    print(f"{step:<34} {time.perf_counter() - start:6.2f} s")
    return result


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wheel = _timed("build the wheel", build_wheel, work)
        bin_dir = _timed("create a fresh venv", make_venv, work)
        _timed("pip install the wheel + deps", install, bin_dir, wheel)
        size = sum(f.stat().st_size for f in (work / "venv").rglob("*") if f.is_file()) / 2**20
        print(f"{'venv size':<34} {size:6.1f} MiB")
        outside = work / "elsewhere"
        outside.mkdir()
        shutil.copy(INTENT, outside / "intent.yaml")
        failed = 0
        for args in (["compile", "intent.yaml", "-o", "recipe.yaml"], ["explain", "intent.yaml", "--top", "3"],
                     ["validate", "recipe.yaml"], ["presets", "models"], ["presets", "hardware"],
                     ["schema", "recipe"], ["schema", "--write", "schemas"]):
            start = time.perf_counter()
            done = subprocess.run([str(bin_dir / "automodel-dist"), *args], cwd=outside, capture_output=True)
            failed += done.returncode != 0
            print(f"{'automodel-dist ' + ' '.join(args[:2]):<34} {time.perf_counter() - start:6.2f} s "
                  f"exit {done.returncode}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
