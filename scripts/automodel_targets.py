"""Rewrite automodel_dist/data/automodel/targets.json: the dotted names a recipe's `_target_` (or `*_fn`) can
name inside AutoModel 0.7.0 and the loaders it builds with, read from the installed packages (the oracle extra).

AutoModel resolves such a path while it loads the config, before anything else (components/config/loader.py
`_resolve_target`: the longest importable module prefix, then getattr for the rest): a misspelled one ends the
run with an ImportError. The file holds every module of nemo_automodel (by its files, so one that fails to import
here still counts), the public names each one that imports here defines or re-exports, and the members of the
classes AutoModel's example recipes call a method of (NeMoAutoModelForCausalLM.from_pretrained), plus the
torch and torchdata modules recipes name optimizers, loaders and samplers from.

    .venv/bin/python scripts/automodel_targets.py [--check]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "automodel_dist" / "data" / "automodel" / "targets.json"
THIRD_PARTY = ("torch.optim", "torch.optim.lr_scheduler", "torch.utils.data", "torchdata.stateful_dataloader")
# classes whose members recipes name (`Class.from_pretrained`): AutoModel's auto classes
MEMBER_CLASSES = tuple(f"nemo_automodel.{name}" for name in (
    "NeMoAutoModelForCausalLM", "NeMoAutoModelForImageTextToText", "NeMoAutoModelForSequenceClassification",
    "NeMoAutoModelForTextToWaveform", "NeMoAutoModelBiEncoder", "NeMoAutoModelCrossEncoder"))


def module_names(package: Path, prefix: str) -> list[str]:
    names = [prefix]
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if "__pycache__" in parts:
            continue
        names.append(".".join((prefix, *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return sorted(set(names))


def public_names(module: Any, own: str) -> list[str]:
    """Names defined in `own` (or listed in __all__), and submodules: what a recipe means to name there."""
    listed = set(getattr(module, "__all__", ()) or ())
    out = []
    for name in dir(module):
        if name.startswith("_"):
            continue
        obj = getattr(module, name, None)
        where = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", "") or ""
        if name in listed or str(where).startswith(own):
            out.append(name)
    return sorted(out)


def build() -> dict[str, Any]:
    import nemo_automodel

    modules: dict[str, list[str] | None] = {}
    for name in module_names(Path(nemo_automodel.__file__).parent, "nemo_automodel"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except BaseException:  # a module that needs a GPU package: its names stay unknown
            modules[name] = None
            continue
        modules[name] = public_names(module, "nemo_automodel")
    for name in THIRD_PARTY:
        module = importlib.import_module(name)
        modules[name] = public_names(module, name.split(".")[0])
    members = {}
    for dotted in MEMBER_CLASSES:
        module_name, _, cls_name = dotted.rpartition(".")
        cls = getattr(importlib.import_module(module_name), cls_name, None)
        if cls is not None:
            members[dotted] = sorted(n for n in dir(cls) if not n.startswith("_"))
    from importlib.metadata import version

    return {"generated_by": "scripts/automodel_targets.py", "source": f"nemo-automodel {version('nemo-automodel')}",
            "modules": modules, "members": members}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from what is installed")
    args = parser.parse_args()
    text = json.dumps(build(), sort_keys=True, separators=(",", ":")) + "\n"
    if args.check:
        same = OUT.read_text() == text
        print("up to date" if same else f"{OUT} differs from the installed packages")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
