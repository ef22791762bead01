"""Import Megatron-Bridge's published performance tables (every release, every revision) as measurement rows.

    python benchmarks/import_measurements.py GIT_DIR > benchmarks/measurements/megatron_bridge.csv

GIT_DIR is a clone of NVIDIA-NeMo/Megatron-Bridge. Every commit that touched `docs/performance-summary.md`
or `docs/performance-summary-archive.md` is read; each table row becomes one measurement, keyed by
release, task, system, model, precision and layout, and the newest revision of a row wins (later commits
fix typos). A cell "a (b)" gives two runs: the release notes say the parenthesised figure used another
quantization granularity (25.09/25.11: FP8 blockwise on H100, MXFP8 on Blackwell); the layout cells of
such a row follow the same convention. Only the rows, the facts, are committed, not the pages.

Each row also gets the recipe conditions its run used (recompute, CUDA graphs, MoE dispatcher, EP overlap,
ETP ...), read from the performance presets of the release that produced it (benchmarks/mbridge_presets.py)
and named by path@commit; a row no preset matches says why and leaves them empty.
"""

from __future__ import annotations

import ast
import csv
import functools
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import mbridge_presets as mp
import yaml

DOCS = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
REPO = "NVIDIA-NeMo/Megatron-Bridge"
FIELDS = ("framework", "release", "task", "system", "model", "gpus", "precision", "gbs", "mbs", "seq", "fsdp",
          "tp", "pp", "cp", "vp", "ep", "tokens_per_s_per_gpu", "tflops_per_gpu", "source", "notes")
CONDITIONS = ("recompute", "recompute_modules", "recompute_layers", "cpu_offload_layers", "cuda_graph_impl",
              "cuda_graph_scope", "dispatcher", "flex_backend", "ep_overlap", "delay_wgrad", "etp", "capacity_factor",
              "megatron_fsdp", "conditions_source", "conditions_note")
HEADER_NAMES = {"#-GPUs": "gpus", "GBS": "gbs", "MBS": "mbs", "Sequence Length": "seq", "FSDP": "fsdp",
                "TP": "tp", "PP": "pp", "CP": "cp", "VP": "vp", "EP": "ep", "GA": "ga",
                "Tokens / sec / GPU": "tokens_per_s_per_gpu", "Model TFLOP / sec / GPU": "tflops_per_gpu",
                "Precision": "precision", "System": "system", "Model": "model"}
# 25.09 and 25.11 have no precision column: FP8 (per-tensor current scaling) outside, blockwise inside.
ALTERNATE_PRECISION = {"DGX-H100": ("FP8", "FP8-blockwise")}
DEFAULT_PRECISION = ("FP8", "MXFP8")


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True).stdout


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _split(cell: str) -> tuple[str, str]:
    """'a (b)' -> (a, b); 'a' -> (a, a); footnote marks dropped."""
    cell = re.sub(r"\[\^[^\]]*\]", "", cell).strip()
    m = re.fullmatch(r"(.*?)\s*\((.*)\)", cell)
    return (m.group(1).strip(), m.group(2).strip()) if m else (cell, cell)


def parse(text: str, commit: str, path: str) -> Iterator[dict[str, str]]:
    release = task = system = model = ""
    header: list[str] = []
    for line in text.splitlines():
        if m := re.match(r"## (\S+) NeMo Container", line):
            release = m.group(1)
        elif line.startswith("### "):
            task = line[4:].replace(" Performance", "").strip().lower()
        elif m := re.match(r"#### System: (.*)", line):
            system, model = m.group(1).strip(), ""
        elif m := re.match(r"#### Model: (.*)", line):
            model, system = m.group(1).strip(), ""
        elif line.startswith("| System") or line.startswith("| Model"):
            header = [HEADER_NAMES.get(c, c) for c in _cells(line)]
        elif line.startswith("|--") or line.startswith("| --"):
            continue
        elif line.startswith("|") and header and release:
            cells = _cells(line)
            if len(cells) != len(header):
                continue
            raw = dict(zip(header, cells, strict=True))
            raw.setdefault("system", system)
            raw.setdefault("model", model)
            tags = re.findall(r"\(([^)]*)\)", raw["model"])  # (tokendrop), (dropless), (w/o MTP)
            raw["model"] = re.sub(r"\s*\([^)]*\)", "", raw["model"]).strip()
            alternate = any("(" in c for c in raw.values())
            for variant in (0, 1) if alternate else (0,):
                row = {k: _split(v)[variant] for k, v in raw.items()}
                if "precision" not in row:
                    row["precision"] = ALTERNATE_PRECISION.get(row["system"], DEFAULT_PRECISION)[variant]
                # FSDP is a switch in 25.09-26.04 ("1" on, "0" Megatron's distributed optimizer) and a size later
                row["fsdp"] = "0" if row.get("fsdp", "") in ("", "0") else "1"
                notes = list(tags)
                if alternate:
                    notes.append("parenthesised variant" if variant else "primary variant")
                yield {**{k: row.get(k, "") for k in FIELDS}, "framework": "megatron-bridge", "release": release,
                       "task": task or "pre-training", "source": f"{REPO} {path}@{commit[:12]}",
                       "notes": "; ".join(notes)}


def collect(git_dir: str) -> list[dict[str, str]]:
    commits = git(git_dir, "log", "--reverse", "--format=%H", "--", *DOCS).split()
    rows: dict[tuple, dict[str, str]] = {}
    for commit in commits:
        for path in DOCS:
            try:
                text = git(git_dir, "show", f"{commit}:{path}")
            except subprocess.CalledProcessError:
                continue
            for row in parse(text, commit, path):
                key = tuple(row[k] for k in FIELDS[:16])
                rows[key] = row  # the newest revision of the same run wins
    return sorted(rows.values(), key=lambda r: tuple(r[k] for k in ("release", "task", "model", "system", "gpus",
                                                                    "precision", "gbs", "mbs", "tp", "pp", "vp",
                                                                    "ep", "cp")))


# --- recipe conditions from the release's performance presets ---
# The Megatron-Bridge release in each NeMo container: docs/releases/software-versions.md (25.09: 0.1.0rc3,
# 25.11: 0.2.0, 26.02: 0.3.0, 26.04: 0.4.0, 26.06: 0.5.0); the point releases from the docs: known-issues.md
# ("Fixed in 26.02.01 (r0.3.1)"), docs/fern/docs.yml ("0.4.2 (latest) · 26.04.01") and r0.5.0's "update docs
# version for 0.5.1 (26.06.01)"; 26.08 is the first table of v0.6.0. 25.09 kept its presets as YAML and 26.08
# as flat recipe functions (src/megatron/bridge/perf_recipes), which this importer does not read.
RELEASE_TAGS = {"25.09": "v0.1.0rc3", "25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1",
                "26.04": "v0.4.0", "26.04.01": "v0.4.2", "26.06": "v0.5.0", "26.06.01": "v0.5.1", "26.08": "v0.6.0"}
PRESET_MODELS = {"LLAMA3_8B": "LLAMA3_8B", "LLAMA3_70B": "LLAMA3_70B", "LLAMA3.1_405B": "LLAMA31_405B",
                 "DeepSeekV3": "DEEPSEEK_V3", "GPT OSS 120B": "GPT_OSS_120B", "Qwen3_30B_a3B": "QWEN3_30B_A3B",
                 "Qwen3_235B_a22B": "QWEN3_235B_A22B", "Kimi_K2": "KIMI_K2", "Nemotron_3_Nano": "NEMOTRON_3_NANO",
                 "Nemotron_3_Super": "NEMOTRON_3_SUPER", "Nemotron_3_Ultra": "NEMOTRON_3_ULTRA",
                 "DeepSeekV4 Flash": "DEEPSEEK_V4_FLASH"}
# 25.09/25.11's "FP8" is per-tensor current scaling (see ALTERNATE_PRECISION); blockwise is the "subchannel" preset
PRESET_PRECISIONS = {"BF16": "BF16", "FP8": "FP8_CS", "FP8-CS": "FP8_CS", "MXFP8": "FP8_MX", "FP8-MX": "FP8_MX",
                     "FP8-blockwise": "FP8_SC", "NVFP4": "NVFP4"}
PRESET_TASKS = {"pre-training": "PRETRAIN", "lora": "LORA", "sft": "SFT"}
PRESET_LAYOUT = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
                 "cp": "context_parallel_size", "vp": "virtual_pipeline_model_parallel_size",
                 "ep": "expert_model_parallel_size", "mbs": "micro_batch_size"}


class Release:
    """The performance presets and perf scripts of one Megatron-Bridge commit."""

    def __init__(self, git_dir: str, tag: str):
        self.git_dir, self.tag = git_dir, tag
        self.commit = git(git_dir, "rev-parse", f"{tag}^{{commit}}").strip()
        files = git(git_dir, "ls-tree", "-r", "--name-only", self.commit, "--", "scripts/performance").split()
        self.source = mp.Source(read=self.read, find_def=self.find_def)
        self.perf_scripts = [f for f in files if f.startswith("scripts/performance/configs/") and f.endswith(".py")
                             and not f.endswith("workload_base_configs.py")]
        # presets by file: each family's module is the namespace its perf scripts read (`base_cfgs.NAME`)
        self.presets: dict[str, dict[str, dict[str, Any]]] = {}
        defaults = self._defaults(files)
        for path in (f for f in files if f.endswith("workload_base_configs.py")):
            self.presets[path] = mp.read_presets(self.read(path) or "", defaults)
        self.yaml_presets = [f for f in files if f.startswith("scripts/performance/configs/") and f.endswith(".yaml")]
        self.flat_recipes = [f for f in git(git_dir, "ls-tree", "-r", "--name-only", self.commit, "--",
                                            "src/megatron/bridge/perf_recipes").split() if f.endswith(".py")]

    @functools.cache  # noqa: B019 - one Release per tag, alive for the whole import
    def read(self, path: str) -> str | None:
        try:
            return git(self.git_dir, "show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError:
            return None

    def find_def(self, name: str, folder: str) -> str | None:
        try:
            hits = git(self.git_dir, "grep", "-l", f"def {name}(", self.commit, "--", folder).split()
        except subprocess.CalledProcessError:
            return None
        return hits[0].split(":", 1)[1] if hits else None

    def _defaults(self, files: list[str]) -> dict[str, Any]:
        for path in (f for f in files if f.startswith("scripts/performance/utils/")):
            defaults = mp.dataclass_defaults(self.read(path) or "", "WorkloadBaseConfig")
            if defaults:
                return defaults
        return {}

    def match(self, row: dict[str, str]) -> tuple[str, str, mp.PresetKey, dict[str, Any]] | str:
        """(file, name, key, preset) whose model, task, GPU, precision and layout are the row's; else why not."""
        model = PRESET_MODELS.get(row["model"])
        precision = PRESET_PRECISIONS.get(row["precision"])
        gpu = row["system"].removeprefix("DGX-").lower()
        if model is None or precision is None:
            return f"no preset name for model {row['model']!r} / precision {row['precision']!r}"
        named = [(path, name, key, preset) for path, presets in self.presets.items()
                 for name, preset in presets.items()
                 if (key := mp.preset_key(name)) and (key.model, key.task, key.gpu, key.precision)
                 == (model, PRESET_TASKS.get(row["task"], ""), gpu, precision)]
        if not named:
            return f"no {model} {row['task']} preset for {gpu} {precision} at {self.tag}"
        fitting = [m for m in named if _layout_matches(row, m[3], batch=True)]
        if fitting:
            return min(fitting, key=lambda m: (m[2].variant, m[1]))
        # the table's batch may come from the command line (weak scaling, micro batch): the parallel sizes decide
        fitting = [m for m in named if _layout_matches(row, m[3], batch=False)]
        if len({repr(sorted(m[3].items())) for m in fitting}) == 1:
            return fitting[0]
        return f"no {model} {gpu} {precision} preset at {self.tag} has the row's TP/PP/CP/VP/EP" if not fitting \
            else f"{len(fitting)} {model} {gpu} {precision} presets at {self.tag} differ and none has the row's batch"

    def conditions(self, row: dict[str, str]) -> dict[str, str]:
        if self.yaml_presets:
            return self._yaml_conditions(row)
        if not self.presets:
            return self._flat_conditions(row)
        found = self.match(row)
        if isinstance(found, str):
            return {"conditions_note": found}
        path, name, key, preset = found
        perf = self._perf_function(path, key)
        if perf is None:
            return {"conditions_note": f"{name}: no perf script function for {key.model.lower()} on {key.gpu}"}
        perf_path, func = perf
        state = mp.run_conditions(self.source, perf_path, func, key, preset, self.presets[path])
        note = "" if _layout_matches(row, preset, batch=True) else "MBS/GBS differ from the preset's"
        source = f"{REPO} {path}:{name}, {perf_path}:{func.name}@{self.commit[:12]}"
        return {**_columns(state, moe=not key.model.startswith("LLAMA")), "conditions_source": source,
                "conditions_note": note}

    def _yaml_conditions(self, row: dict[str, str]) -> dict[str, str]:
        """25.09: one YAML per model (a ConfigContainer section merged over the recipe, and a perf_matrix by GPU,
        GPU count and precision) read by run_script.py's main, which builds the recipe from its command line."""
        model = PRESET_MODELS.get(row["model"], "").lower()
        path = next((p for p in self.yaml_presets if model and p.endswith(f"/{model}_llm_pretrain.yaml")), None)
        if path is None:
            return {"conditions_note": f"no {row['model']} preset YAML at {self.tag}"}
        family = path.split("/")[-2]
        doc = yaml.safe_load(self.read(path) or "") or {}
        gpu, gpus = row["system"].removeprefix("DGX-").lower(), int(row["gpus"])
        entry = ((doc.get("perf_matrix") or {}).get(gpu) or {}).get(f"num_gpus_{gpus}")
        if not entry:
            return {"conditions_note": f"{path} at {self.tag} has no perf_matrix entry for {gpus} {gpu}"}
        precision = PRESET_PRECISIONS.get(row["precision"], "")
        # run_script's --compute_dtype and --fp8_recipe ("ss": subchannel, i.e. blockwise)
        flags = {"FP8_CS": "fp8_cs", "FP8_MX": "fp8_mx", "FP8_SC": "fp8_ss"}.get(precision, "bf16")
        dtype, _, recipe = flags.partition("_")
        notes = row["notes"].split("; ")
        args = {"model_name": family, "model_size": model.removeprefix(f"{family}_"), "gpu": gpu, "num_gpus": gpus,
                "compute_dtype": dtype, "fp8_recipe": recipe or "cs", "config_file": path,
                "use_tokendrop": True if "tokendrop" in notes else False if "dropless" in notes else None}
        script = "scripts/performance/run_script.py"
        tree = self.source.tree(script)
        main = next((n for n in (tree.body if tree else ()) if isinstance(n, ast.FunctionDef) and n.name == "main"),
                    None)
        if main is None:
            return {"conditions_note": f"no {script} main at {self.tag}"}
        key = mp.PresetKey(model.upper(), "PRETRAIN", gpu, precision, "")
        state = mp.run_conditions(self.source, script, main, key, {}, {}, args=args, yaml_doc=doc)
        if not _layout_matches(row, {**state, "num_gpus": gpus}, batch=True):
            return {"conditions_note": f"{path} perf_matrix at {self.tag}: layout differs from the row's"}
        return {**_columns(state, moe=not key.model.startswith("LLAMA")),
                "conditions_source": f"{REPO} {path}:perf_matrix.{gpu}.num_gpus_{gpus}, {script}:main"
                                     f"@{self.commit[:12]}"}

    def _flat_conditions(self, row: dict[str, str]) -> dict[str, str]:
        """A flat recipe (26.08 on) states layout and conditions in one function: the row's is the one named
        for its model, task, GPU count, GPU and precision whose layout (as it runs) is the row's."""
        wanted = (PRESET_MODELS.get(row["model"]), PRESET_TASKS.get(row["task"], ""),
                  row["system"].removeprefix("DGX-").lower(), PRESET_PRECISIONS.get(row["precision"]), int(row["gpus"]))
        named = []
        for path in self.flat_recipes:
            tree = self.source.tree(path)
            for node in tree.body if tree else ():
                found = isinstance(node, ast.FunctionDef) and mp.flat_recipe_key(node.name)
                if found and (found[0].model, found[0].task, found[0].gpu, found[0].precision, found[1]) == wanted:
                    named.append((found[0].variant, node.name, path, node, found[0]))
        for _, name, path, func, key in sorted(named, key=lambda m: (m[0] != "", m[0], m[1])):
            state = mp.run_conditions(self.source, path, func, key, {}, {})
            if _layout_matches(row, {**state, "num_gpus": int(row["gpus"])}, batch=True):
                source = f"{REPO} {path}:{name}@{self.commit[:12]}"
                return {**_columns(state, moe=not key.model.startswith("LLAMA")), "conditions_source": source}
        why = "has the row's layout" if named else "is named for its model, GPU count, GPU and precision"
        return {"conditions_note": f"no flat perf recipe at {self.tag} {why}"}

    def _perf_function(self, preset_path: str, key: mp.PresetKey) -> tuple[str, ast.FunctionDef] | None:
        folder = preset_path.rsplit("/", 1)[0]
        names = mp.perf_function_names(key.model, key.task, key.gpu)
        for path in (p for p in self.perf_scripts if p.startswith(folder + "/")):
            tree = self.source.tree(path)
            for node in tree.body if tree else ():
                if isinstance(node, ast.FunctionDef) and node.name in names:
                    return path, node
        return None


def _layout_matches(row: dict[str, str], preset: dict[str, Any], *, batch: bool) -> bool:
    """The preset's parallel sizes are the row's (and, with batch, its micro batch and GBS per GPU)."""
    for column, name in PRESET_LAYOUT.items():
        if column == "mbs" and not batch:
            continue
        stated = preset.get(name)
        given = 1 if row[column] in ("", "n/a", "-") else int(row[column])
        if (1 if stated in (None, mp.UNKNOWN) else stated) != given:
            return False
    gbs, gpus = preset.get("global_batch_size"), preset.get("num_gpus", 1)
    if not batch:
        return True
    return isinstance(gbs, int) and isinstance(gpus, int) and gbs * int(row["gpus"]) == int(row["gbs"]) * gpus


def _text(value: Any) -> str:
    """A setting as a CSV cell: "" unknown, "none" for None or [], lists joined with "+"."""
    if value is mp.UNKNOWN:
        return ""
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "+".join(str(v) for v in value)
    return str(value)


# What a setting is when no layer assigns it: MCore TransformerConfig's defaults (recompute_granularity None,
# no CPU offloading, recompute_modules ["core_attn"] under selective) and Bridge's CommOverlapConfig (EP overlap
# and delayed wgrad None, which leaves MCore's False).
UNSET = {"recompute_granularity": None, "cpu_offloading_num_layers": None, "overlap_moe_expert_parallel_comm": False,
         "delay_wgrad_compute": False}
MOE_COLUMNS = ("dispatcher", "flex_backend", "ep_overlap", "delay_wgrad", "etp", "capacity_factor")


def _columns(state: dict[str, Any], moe: bool) -> dict[str, str]:
    state = {**UNSET, **state}
    granularity = state["recompute_granularity"]
    modules = state.get("recompute_modules")
    if granularity == "selective" and modules is None:
        modules = ["core_attn"]
    dispatcher = state.get("moe_token_dispatcher_type", mp.UNKNOWN)
    backend = state.get("moe_flex_dispatcher_backend", mp.UNKNOWN)
    if backend in (None, mp.UNKNOWN) and state.get("moe_enable_deepep") is True:
        backend = "deepep"  # 25.09's switch for the flex dispatcher's only backend then
    graphs = state.get("cuda_graph_impl", mp.UNKNOWN)
    if graphs is mp.UNKNOWN and isinstance(state.get("enable_cuda_graph"), bool):
        graphs = "local" if state["enable_cuda_graph"] else "none"  # 25.09: MCore's own (local) CUDA graphs
    capacity = [f"{label} {state[k]}" for label, k in (("expert", "moe_expert_capacity_factor"),
                                                       ("rank", "moe_expert_rank_capacity_factor"))
                if state.get(k) not in (None, mp.UNKNOWN)]
    columns = {
        "recompute": _text(granularity),
        "recompute_modules": _text(modules) if granularity == "selective" else "",
        "recompute_layers": _text(state.get("recompute_num_layers", mp.UNKNOWN)) if granularity == "full" else "",
        "cpu_offload_layers": _text(state["cpu_offloading_num_layers"]),
        "cuda_graph_impl": _text(graphs),
        "cuda_graph_scope": _text(state.get("cuda_graph_scope", mp.UNKNOWN)),
        "dispatcher": _text(dispatcher),
        "flex_backend": _text(backend) if dispatcher == "flex" else "",
        "ep_overlap": _text(state["overlap_moe_expert_parallel_comm"]),
        "delay_wgrad": _text(state["delay_wgrad_compute"]),
        "etp": _text(state.get("expert_tensor_parallel_size", mp.UNKNOWN)),
        "capacity_factor": "; ".join(capacity) or "none",
        "megatron_fsdp": _text(state.get("use_megatron_fsdp", mp.UNKNOWN)),
    }
    return columns if moe else {**columns, **{k: "" for k in MOE_COLUMNS}}


def add_conditions(git_dir: str, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    releases: dict[str, Release | None] = {}
    out = []
    for row in rows:
        tag = RELEASE_TAGS.get(row["release"])
        if tag not in releases:
            releases[tag] = Release(git_dir, tag) if tag else None
        release = releases[tag]
        if release is None or not (release.presets or release.flat_recipes or release.yaml_presets):
            found = {"conditions_note": f"no workload presets at {tag or 'an unknown tag'} (not read)"}
        else:
            found = release.conditions(row)
        out.append({**row, **{k: "" for k in CONDITIONS}, **found})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    writer = csv.DictWriter(sys.stdout, fieldnames=FIELDS + CONDITIONS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(add_conditions(argv[0], collect(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
