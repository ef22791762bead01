"""Read the recipe conditions of Megatron-Bridge's performance runs from its sources, without running them.

Megatron-Bridge's performance scripts build each benchmark run in three layers: a model recipe function
(`src/megatron/bridge/recipes/...`) sets the model's defaults, a per-GPU perf function
(`scripts/performance/configs/<family>/*_llm_pretrain.py`) adjusts them, and a workload preset
(`*workload_base_configs.py`: a `WorkloadBaseConfig(...)` or `replace(BASE, key=value)` chain) is applied
by `set_workload_base_configs` (`scripts/performance/utils/`). This module parses those files with `ast`
and follows the assignments with a small interpreter: straight-line code, `if` on values it can evaluate
(an `if` it cannot evaluate leaves what either branch assigns unknown), calls into functions it can find.
It never imports or executes their code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
NOT_FOLLOWED: Any = object()  # a call the reader does not run (its value is evaluated instead)

# The settings a run's conditions are made of (the last attribute name of an assignment target).
TRACKED = frozenset({
    "recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers",
    "cpu_offloading_num_layers", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "cuda_graph_impl",
    "cuda_graph_scope", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "expert_tensor_parallel_size",
    "use_megatron_fsdp", "moe_expert_capacity_factor", "moe_expert_rank_capacity_factor", "enable_cuda_graph",
    "moe_enable_deepep",
    # the layout, which a flat recipe (26.08 on) states beside them
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "virtual_pipeline_model_parallel_size", "expert_model_parallel_size", "micro_batch_size", "global_batch_size",
})
PRESET_NAME = re.compile(
    r"(?P<model>[A-Z0-9_]+?)_(?:(?P<task>PRETRAIN|SFT|LORA|FINETUNE)_)?CONFIG_(?P<gpu>GB300|GB200|B300|B200|H100)"
    r"_(?P<precision>BF16|FP8_CS|FP8_MX|FP8_SC|NVFP4)(?:_(?P<variant>V\d+))?")
OLD_PRESET_NAME = re.compile(
    r"(?P<model>[A-Z0-9_]+?)_(?P<gpu>GB300|GB200|B300|B200|H100)_(?P<precision>BF16|FP8_CS|FP8_MX|FP8_SC|NVFP4)"
    r"(?:_(?P<task>SFT|LORA))?_BASE_CONFIG")
# 26.08 on: one flat recipe function per model, task, GPU count, GPU and precision (src/megatron/bridge/perf_recipes)
FLAT_RECIPE_NAME = re.compile(
    r"(?P<model>[a-z0-9_]+?)_(?P<task>pretrain|sft|lora)_(?P<gpus>\d+)gpu_(?P<gpu>gb300|gb200|b300|b200|h100)"
    r"_(?P<precision>bf16|fp8cs|fp8mx|fp8sc|nvfp4)(?:_(?P<variant>[a-z0-9_]+))?_config")
# apply_flex_dispatcher_backend (src/megatron/bridge/training/flex_dispatcher_backend.py) skips the flex
# dispatcher where the backend cannot run: DeepEP on Ampere/Hopper and B200/B300, HybridEP on SM 8.x-10.x.
FLEX_BACKEND_GPUS = {"deepep": ("h100", "b200", "b300"), "hybridep": ("h100", "b200", "b300", "gb200", "gb300")}


@dataclass(frozen=True)
class PresetKey:
    model: str  # e.g. GPT_OSS_120B
    task: str  # PRETRAIN | SFT | LORA
    gpu: str  # h100 | b200 | ...
    precision: str  # BF16 | FP8_CS | FP8_MX | FP8_SC | NVFP4
    variant: str  # V1, V2 ... or "" (unversioned)


def preset_key(name: str) -> PresetKey | None:
    """The model, task, GPU, precision and variant a preset's name encodes (either naming scheme)."""
    m = PRESET_NAME.fullmatch(name) or OLD_PRESET_NAME.fullmatch(name)
    if not m:
        return None
    parts = m.groupdict()
    return PresetKey(parts["model"], parts.get("task") or "PRETRAIN", parts["gpu"].lower(), parts["precision"],
                     parts.get("variant") or "")


def flat_recipe_key(name: str) -> tuple[PresetKey, int] | None:
    """The key and GPU count a flat recipe function's name encodes (the variant is the name's tail)."""
    m = FLAT_RECIPE_NAME.fullmatch(name)
    if not m:
        return None
    precision = {"fp8cs": "FP8_CS", "fp8mx": "FP8_MX", "fp8sc": "FP8_SC"}.get(m["precision"], m["precision"].upper())
    return PresetKey(m["model"].upper(), m["task"].upper(), m["gpu"], precision, m["variant"] or ""), int(m["gpus"])


def literal(node: ast.expr, env: dict[str, Any] | None = None) -> Any:
    """A constant expression's value (names from env); UNKNOWN where it is not constant."""
    env = env or {}
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [literal(e, env) for e in node.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else items
    if isinstance(node, ast.Name):
        return env.get(node.id, UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = literal(node.operand, env)
        return UNKNOWN if value is UNKNOWN else -value
    return UNKNOWN


def dataclass_defaults(source: str, class_name: str) -> dict[str, Any]:
    """The field defaults of a dataclass (annotated assignments with a constant value)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {s.target.id: literal(s.value) for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None}
    return {}


def read_presets(source: str, defaults: dict[str, Any], class_name: str = "WorkloadBaseConfig"
                 ) -> dict[str, dict[str, Any]]:
    """Every module-level preset: `NAME = Class(k=v)`, `NAME = replace(OTHER, k=v)` or `NAME = OTHER`."""
    presets: dict[str, dict[str, Any]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value, base = node.value, None
        if isinstance(value, ast.Name):
            base, keywords = presets.get(value.id), []
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            keywords = value.keywords
            if value.func.id == class_name:
                base = defaults
            elif value.func.id == "replace" and value.args and isinstance(value.args[0], ast.Name):
                base = presets.get(value.args[0].id)
        if base is None:
            continue
        preset = dict(base)
        for kw in keywords:
            if kw.arg is not None:
                preset[kw.arg] = literal(kw.value)
        presets[node.targets[0].id] = preset
    return presets


@dataclass
class Source:
    """The files of one commit, read through a function (path -> text, or None when absent)."""

    read: Callable[[str], str | None]
    find_def: Callable[[str, str], str | None]  # (function name, folder) -> path of the file defining it
    _trees: dict[str, ast.Module | None] = field(default_factory=dict)

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            text = self.read(path)
            self._trees[path] = ast.parse(text) if text is not None else None
        return self._trees[path]


def _module_path(module: str, level: int, here: str) -> list[str]:
    """Candidate files for an import: scripts' `utils.x` beside the perf scripts, `megatron.bridge.x` in src."""
    if level:
        folder = here.rsplit("/", level)[0]
        return [f"{folder}/{module.replace('.', '/')}.py", f"{folder}/{module.replace('.', '/')}/__init__.py"]
    if module.startswith("megatron.bridge"):
        stem = "src/" + module.replace(".", "/")
        return [f"{stem}.py", f"{stem}/__init__.py"]
    stem = "scripts/performance/" + module.replace(".", "/")
    return [f"{stem}.py", f"{stem}/__init__.py"]


# Where the reader follows calls: the perf scripts and recipes, and the config helpers they call; never into
# training itself (pretrain(...) and what it runs).
FOLLOWED = ("scripts/performance/", "src/megatron/bridge/recipes/", "src/megatron/bridge/perf_recipes/",
            "src/megatron/bridge/training/utils/moe_token_drop.py")


class Interpreter:
    """Follows the tracked assignments of a perf function through the recipe and override functions it calls."""

    MAX_DEPTH = 8

    def __init__(self, source: Source, gpu: str, preset: dict[str, Any], family_presets: dict[str, Any],
                 yaml_doc: dict[str, Any] | None = None):
        self.source, self.gpu, self.preset = source, gpu, preset
        self.family_presets = family_presets
        self.yaml_doc = yaml_doc
        self._returns: list[Any] = []
        self._constants: dict[str, dict[str, Any]] = {}
        self.state: dict[str, Any] = {}

    # --- finding functions ---
    def _function(self, path: str, name: str) -> tuple[str, ast.FunctionDef] | None:
        tree = self.source.tree(path)
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return path, node
        for node in tree.body:  # imported: follow the import
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return self._imported(node.module or "", node.level, path, alias.name)
        return None

    def _imported(self, module: str, level: int, here: str, name: str) -> tuple[str, ast.FunctionDef] | None:
        for candidate in _module_path(module, level, here):
            tree = self.source.tree(candidate)
            if tree is None:
                continue
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return candidate, node
            if module.startswith("megatron.bridge"):  # re-exported by a package __init__
                defined = self.source.find_def(name, candidate.rsplit("/", 1)[0])
                if defined:
                    return self._function(defined, name)
        return None

    # --- evaluation ---
    def value(self, node: ast.expr | None, env: dict[str, Any]) -> Any:
        if node is None:
            return None
        if isinstance(node, ast.Attribute):
            base = self.value(node.value, env)
            if isinstance(base, dict):
                return base.get(node.attr, UNKNOWN)
            return self.state.get(node.attr, UNKNOWN) if node.attr in TRACKED else UNKNOWN
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = self.value(node.left, env), self.value(node.comparators[0], env)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            op = node.ops[0]
            table = {ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right, ast.Is: lambda: left is right,
                     ast.IsNot: lambda: left is not right, ast.In: lambda: left in right,
                     ast.NotIn: lambda: left not in right, ast.Lt: lambda: left < right,
                     ast.LtE: lambda: left <= right, ast.Gt: lambda: left > right, ast.GtE: lambda: left >= right}
            try:
                return table[type(op)]() if type(op) in table else UNKNOWN
            except TypeError:  # e.g. None < 1
                return UNKNOWN
        if isinstance(node, ast.BoolOp):  # Python's: the first value that decides, else the last
            for item in node.values[:-1]:
                value = self.value(item, env)
                if value is UNKNOWN or bool(value) != isinstance(node.op, ast.And):
                    return value
            return self.value(node.values[-1], env)
        if isinstance(node, ast.JoinedStr):
            parts = [self.value(v.value, env) if isinstance(v, ast.FormattedValue) else literal(v, env)
                     for v in node.values]
            return UNKNOWN if any(p is UNKNOWN for p in parts) else "".join(str(p) for p in parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.value(node.operand, env)
            return UNKNOWN if inner is UNKNOWN else not inner
        if isinstance(node, ast.IfExp):
            test = self.value(node.test, env)
            if test is UNKNOWN:
                return UNKNOWN
            return self.value(node.body if test else node.orelse, env)
        if isinstance(node, ast.Call):
            return self._call_value(node, env)
        if isinstance(node, ast.Dict):  # {"k": v, **other}: the recipes' recommended-kwargs idiom
            merged: dict[str, Any] = {}
            for key, item in zip(node.keys, node.values, strict=True):
                value = self.value(item, env)
                if key is None:
                    if not isinstance(value, dict):
                        return UNKNOWN
                    merged |= value
                elif isinstance(name := literal(key), str):
                    merged[name] = value
                else:
                    return UNKNOWN
            return merged
        return literal(node, env)

    def _call_value(self, node: ast.Call, env: dict[str, Any]) -> Any:
        func = node.func
        args = [self.value(a, env) for a in node.args]
        if isinstance(func, ast.Attribute) and func.attr in ("upper", "lower") and not node.args:
            base = self.value(func.value, env)
            return getattr(base, func.attr)() if isinstance(base, str) else UNKNOWN
        if isinstance(func, ast.Attribute) and func.attr == "get" and args:
            base = self.value(func.value, env)
            return base.get(args[0], args[1] if len(args) > 1 else None) if isinstance(base, dict) else UNKNOWN
        # OmegaConf on plain mappings (25.09's YAML presets): create and to_container keep them, merge overlays
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "OmegaConf":
            if func.attr in ("create", "to_container") and args:
                return args[0]
            if func.attr == "merge" and all(isinstance(a, dict) for a in args):
                return _deep_merge(*args)
            if func.attr == "load":  # the run's YAML, read by the importer
                return self.yaml_doc if self.yaml_doc is not None else UNKNOWN
            return UNKNOWN
        if isinstance(func, ast.Name):
            if func.id == "hasattr":
                return True
            if func.id == "bool" and node.args:
                inner = self.value(node.args[0], env)
                return UNKNOWN if inner is UNKNOWN else bool(inner)
            if func.id == "get_workload_base_config":
                return self.preset
        return UNKNOWN

    # --- execution ---
    def run(self, path: str, func: ast.FunctionDef, env: dict[str, Any], depth: int = 0) -> Any:
        """Run a function body; its return value (UNKNOWN when none was reached or it is not constant)."""
        if depth > self.MAX_DEPTH:
            return UNKNOWN
        self._returns.append(UNKNOWN)
        self._block(path, func.body, env, depth)
        return self._returns.pop()

    def _evaluate(self, path: str, node: ast.expr | None, env: dict[str, Any], depth: int) -> Any:
        """An expression's value, running a call it can follow (a call it cannot follow is evaluated)."""
        if isinstance(node, ast.Call):
            result = self._call(path, node, env, depth)
            if result is not NOT_FOLLOWED:
                return result
        return self.value(node, env)

    def _block(self, path: str, body: list[ast.stmt], env: dict[str, Any], depth: int) -> bool:
        """Run statements; True when a return ended the block."""
        for stmt in body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = self._evaluate(path, stmt.value, env, depth)
                for target in targets:
                    if isinstance(target, ast.Attribute) and target.attr in TRACKED:
                        self.state[target.attr] = value
                    elif isinstance(target, ast.Name):
                        env[target.id] = value
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self._call(path, stmt.value, env, depth)
            elif isinstance(stmt, ast.Return):
                self._returns[-1] = self._evaluate(path, stmt.value, env, depth)
                return True
            elif isinstance(stmt, ast.If):
                test = self.value(stmt.test, env)
                if test is not UNKNOWN:
                    if self._block(path, stmt.body if test else stmt.orelse, env, depth):
                        return True
                else:
                    self._either(path, stmt, env, depth)
            elif isinstance(stmt, (ast.With, ast.Try)):
                if self._block(path, stmt.body, env, depth):
                    return True
            elif isinstance(stmt, (ast.For, ast.While)):
                self._either(path, stmt, env, depth)
        return False

    def _either(self, path: str, stmt: ast.If | ast.For | ast.While, env: dict[str, Any], depth: int) -> None:
        """A branch that may or may not run: what it would change becomes unknown."""
        before = dict(self.state)
        self._block(path, stmt.body, dict(env), depth)
        after_body, self.state = self.state, dict(before)
        self._block(path, stmt.orelse, dict(env), depth)
        after_else = self.state
        self.state = {k: (after_body.get(k, UNKNOWN) if after_body.get(k, UNKNOWN) == after_else.get(k, UNKNOWN)
                          else UNKNOWN) for k in set(after_body) | set(after_else)}

    def _call(self, path: str, node: ast.Call, env: dict[str, Any], depth: int) -> Any:
        """Run a call for its effects; its return value, or NOT_FOLLOWED when the reader does not run it."""
        if not isinstance(node.func, ast.Name):
            return NOT_FOLLOWED
        name = node.func.id
        if name == "get_workload_base_config":  # the preset matched to the row stands for its lookup
            return NOT_FOLLOWED
        if name == "apply_overrides":  # 25.09: the YAML's ConfigContainer.model section, merged over the recipe
            model = ((self.yaml_doc or {}).get("ConfigContainer") or {}).get("model") or {}
            self.state |= {k: v for k, v in model.items() if k in TRACKED}
            return None
        if name == "apply_flex_dispatcher_backend":
            backend = self.value(node.args[1] if len(node.args) > 1 else
                                 next((k.value for k in node.keywords if k.arg == "moe_flex_dispatcher_backend"),
                                      None), env)
            if backend is UNKNOWN:
                self.state["moe_token_dispatcher_type"] = self.state["moe_flex_dispatcher_backend"] = UNKNOWN
            elif self.gpu in FLEX_BACKEND_GPUS.get(backend, ()):
                self.state["moe_token_dispatcher_type"], self.state["moe_flex_dispatcher_backend"] = "flex", backend
            return None
        found = self._function(path, name)
        if found is None or not found[0].startswith(FOLLOWED):
            return NOT_FOLLOWED
        callee_path, func = found
        return self.run(callee_path, func, self._bind(callee_path, func, node, env), depth + 1)

    def module_constants(self, path: str) -> dict[str, Any]:
        """A module's constant globals (`NAME = literal`, dict and list displays included)."""
        if path not in self._constants:
            tree = self.source.tree(path)
            self._constants[path] = {
                node.targets[0].id: self.value(node.value, {}) for node in (tree.body if tree else ())
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.Constant, ast.Dict, ast.List, ast.Tuple))}
        return self._constants[path]

    def _bind(self, path: str, func: ast.FunctionDef, node: ast.Call, env: dict[str, Any]) -> dict[str, Any]:
        args = func.args
        params = [*args.posonlyargs, *args.args]
        bound: dict[str, Any] = {**self.module_constants(path), "base_cfgs": self.family_presets}
        for param, default in zip(params[len(params) - len(args.defaults):], args.defaults, strict=True):
            bound[param.arg] = literal(default)
        for param, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            bound[param.arg] = literal(default) if default is not None else UNKNOWN
        for param, arg in zip(params, node.args, strict=False):
            bound[param.arg] = self.value(arg, env)
        given: dict[str, Any] = {}
        for kw in node.keywords:
            value = self.value(kw.value, env)
            if kw.arg is not None:
                given[kw.arg] = value
            elif isinstance(value, dict):
                given |= value
        names = {p.arg for p in (*params, *args.kwonlyargs)}
        bound |= {k: v for k, v in given.items() if k in names}
        if args.kwarg is not None:
            bound[args.kwarg.arg] = {k: v for k, v in given.items() if k not in names}
        return bound


def _deep_merge(*layers: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            both = isinstance(merged.get(key), dict) and isinstance(value, dict)
            merged[key] = _deep_merge(merged[key], value) if both else value
    return merged


def perf_function_names(model: str, task: str, gpu: str) -> tuple[str, ...]:
    """The perf script's function for a model, task and GPU under either naming scheme (25.11 and later)."""
    model, task = model.lower(), task.lower()
    if task == "pretrain":
        return f"{model}_pretrain_config_{gpu}", f"{model}_{gpu}_config"
    return f"{model}_{task}_config_{gpu}", f"{model}_{gpu}_{task}_config"


def run_conditions(source: Source, perf_path: str, func: ast.FunctionDef, key: PresetKey, preset: dict[str, Any],
                   family_presets: dict[str, Any], **legacy: Any) -> dict[str, Any]:
    """The tracked settings after the perf function for this preset has run (UNKNOWN where undecidable).
    25.09's script takes `args` (its command line) and `yaml_doc` (the preset YAML it loads)."""
    interpreter = Interpreter(source, key.gpu, preset, family_presets, legacy.get("yaml_doc"))
    env = {**interpreter.module_constants(perf_path), "precision": key.precision.lower(), "mock": True,
           "config_variant": key.variant.lower() or "v1", "base_cfgs": family_presets,
           "args": legacy.get("args", UNKNOWN)}
    interpreter.run(perf_path, func, env)
    return interpreter.state
