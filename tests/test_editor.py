"""The schemas in a real editor: yaml-language-server (npm) over stdio, set up as the README says.

The server gets exactly the README's `yaml.schemas` mapping, pointed at the files `automodel-dist schema
--write` wrote, and is asked what an editor asks: diagnostics, completions, hover. scripts/setup-env.sh
installs the server into ./node_modules whenever node is present; only a machine without node skips.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lsp_client import SERVER, YamlLanguageServer

from automodel_dist.catalog.hardware import gpu_presets
from automodel_dist.catalog.models import list_models
from automodel_dist.cli import main
from automodel_dist.compiler import compile_intent
from automodel_dist.yamlio import load_document

ROOT = Path(__file__).resolve().parent.parent
INTENTS = sorted((ROOT / "examples" / "intents").glob("*.yaml"))

if shutil.which("node") is None:
    pytest.skip("node is not installed: the yaml-language-server editor tests need node (CI has it)",
                allow_module_level=True)


def readme_schema_mapping(schema_dir: Path) -> dict[Path, list[str]]:
    """The README's `yaml.schemas` snippet, with its placeholder folder replaced by `schema_dir`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```jsonc\n(.*?)```", text, re.DOTALL)
    assert block, "README: the Editors section's jsonc snippet"
    mapping = json.loads(textwrap.dedent(block.group(1)))["yaml.schemas"]
    return {schema_dir / Path(path).name: globs for path, globs in mapping.items()}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("editor")


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[YamlLanguageServer]:
    assert SERVER.is_file(), "yaml-language-server is missing: run `bash scripts/setup-env.sh` (needs npm)"
    schemas = workspace / "schemas"
    assert main(["schema", "--write", str(schemas)]) == 0
    lsp = YamlLanguageServer(workspace, readme_schema_mapping(schemas))
    yield lsp
    lsp.close()


def open_file(server: YamlLanguageServer, workspace: Path, name: str, text: str) -> str:
    path = workspace / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return server.open(path)


def labels(items: list[dict[str, Any]]) -> list[str]:
    return [item["label"] for item in items]


# --- diagnostics ------------------------------------------------------------------------------------

def test_compiled_recipes_and_example_intents_are_clean(server: YamlLanguageServer, workspace: Path) -> None:
    for intent in INTENTS[:4]:
        uri = server.open(intent)  # in place: its modeline points at the schema in this checkout
        assert server.diagnostics(uri) == [], intent.name
        uri = open_file(server, workspace, f"clean/{intent.stem}.recipe.yaml", compile_intent(intent).yaml)
        assert server.diagnostics(uri) == [], intent.name


def test_a_broken_recipe_gets_located_readable_diagnostics(server: YamlLanguageServer, workspace: Path) -> None:
    uri = open_file(server, workspace, "broken.recipe.yaml",
                    "distributed:\n  strategy: fsdp3\n  tp_size: 3x\nstep_scheduler:\n  global_batch_size: 0\n")
    found = {d["range"]["start"]["line"]: d["message"] for d in server.diagnostics(uri)}
    assert set(found) == {1, 2, 4}, found
    assert all(name in found[1] for name in ("fsdp2", "megatron_fsdp", "ddp")), found[1]
    assert "pattern" not in found[1] and "[fF]" not in found[1], "no raw case-insensitive regex"


def test_a_broken_intent_gets_located_readable_diagnostics(server: YamlLanguageServer, workspace: Path) -> None:
    uri = open_file(server, workspace, "broken.intent.yaml",
                    "model: Qwen/Qwen3-8B\nhardware:\n  gpu: h100x\n"
                    "training: {seq_length: 4096, global_batch_size: 64}\nparallelism:\n  tp: 3x\n")
    found = {d["range"]["start"]["line"]: d["message"] for d in server.diagnostics(uri)}
    assert set(found) == {2, 5}, found
    assert all(p.spec.name in found[2] for p in gpu_presets()), found[2]
    assert "integer" in found[5] and "list" in found[5], found[5]


def test_gpu_aliases_in_any_case_are_accepted(server: YamlLanguageServer, workspace: Path) -> None:
    uri = open_file(server, workspace, "alias.intent.yaml", "model: Qwen/Qwen3-8B\nhardware:\n  gpu: H100-SXM\n"
                    "training: {seq_length: 4096, global_batch_size: 64}\n")
    assert server.diagnostics(uri) == []


# --- completion -------------------------------------------------------------------------------------

def test_distributed_keys_are_offered_once_each(server: YamlLanguageServer, workspace: Path) -> None:
    uri = open_file(server, workspace, "keys.recipe.yaml", "distributed:\n  strategy: fsdp2\n  \n")
    offered = labels(server.completion(uri, 2, 2))
    assert len(offered) == len(set(offered)), sorted(k for k in offered if offered.count(k) > 1)
    assert {"tp_size", "pp_size", "ep_size", "pipeline", "moe", "activation_checkpointing"} <= set(offered)


@pytest.mark.parametrize(("text", "line", "col", "expected"), [
    ("distributed:\n  strategy: \n", 1, 12, {"fsdp2", "megatron_fsdp", "ddp"}),
    ("model:\n  backend:\n    dispatcher: \n", 2, 16, {"torch", "deepep", "deepep_v2", "hybridep", "uccl_ep", "mok"}),
    ("model:\n  backend:\n    experts: \n", 2, 13, {"torch", "te", "gmm", "torch_mm", "torch_mm_mxfp8"}),
    ("distributed:\n  pp_size: 2\n  pipeline:\n    pp_schedule: \n", 3, 17,
     {"1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}),
], ids=["strategy", "dispatcher", "experts", "pp_schedule"])
def test_recipe_enum_values_complete(server: YamlLanguageServer, workspace: Path, text: str, line: int, col: int,
                                     expected: set[str]) -> None:
    uri = open_file(server, workspace, f"values-{line}-{col}.recipe.yaml", text)
    assert expected <= set(labels(server.completion(uri, line, col)))


def test_every_gpu_preset_completes(server: YamlLanguageServer, workspace: Path) -> None:
    uri = open_file(server, workspace, "gpu.intent.yaml", "hardware:\n  gpu: \n")
    offered = labels(server.completion(uri, 1, 7))
    assert sorted(offered) == sorted(p.spec.name for p in gpu_presets())


def test_model_ids_complete_as_text(server: YamlLanguageServer, workspace: Path) -> None:
    uri = open_file(server, workspace, "model.intent.yaml", "model: \n")
    offered = labels(server.completion(uri, 0, 7))
    assert not [label for label in offered if "[object" in label]
    ids = {m.id for m in list_models()} | {a.id for m in list_models() for a in m.aliases}
    assert ids <= set(offered), sorted(ids - set(offered))


# --- hover ------------------------------------------------------------------------------------------

def _key_positions(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*prefix, key)
            yield from _key_positions(value, (*prefix, key))


def compiled_variants(workspace: Path) -> dict[str, str]:
    """Every shipped example compiled, plus the launch settings the Slurm and SkyPilot launchers add."""
    texts = {intent.stem: compile_intent(intent).yaml for intent in INTENTS}
    intent = workspace / "launch.intent.yaml"
    intent.write_text(INTENTS[0].read_text(encoding="utf-8") + "launcher: {cloud: aws}\n", encoding="utf-8")
    for launcher in ("slurm", "skypilot"):
        out = workspace / launcher / "recipe.yaml"
        assert main(["compile", str(intent), "-o", str(out), "--launcher", launcher]) == 0
        texts[launcher] = out.read_text(encoding="utf-8")
    return texts


def test_hover_explains_every_key_the_compiler_writes(server: YamlLanguageServer, workspace: Path) -> None:
    seen: dict[str, str] = {}
    for name, text in compiled_variants(workspace).items():
        uri = open_file(server, workspace, f"hover/{name}.recipe.yaml", text)
        doc = load_document(text, what="recipe")
        for path in _key_positions(doc.plain()):
            dotted = ".".join(map(str, path))
            if dotted in seen:
                continue
            line, col = doc.locate(path)
            seen[dotted] = server.hover(uri, line - 1, col)
    assert len(seen) >= 70 and {"step_scheduler.preemption_signal", "skypilot.cloud"} <= set(seen)
    unexplained = []
    for dotted, shown in seen.items():
        title, _, body = shown.partition("\n\n")
        description = body.split("\n\nSource:")[0].strip()
        if not title.startswith("#### ") or "||" in title or len(description) <= 10:
            unexplained.append((dotted, shown[:120]))
    assert not unexplained, "\n".join(map(str, unexplained))
