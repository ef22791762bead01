"""Intent loading: YAML (with positions) -> overrides -> schema check -> defaults -> `Intent`; then `Problem`.

Every mistake in an intent is an `InputError` naming file:line:col (or the override it came from), the
dotted key, what was expected and a fix; all schema problems are reported together, not one per run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from automodel_dist.errors import InputError
from automodel_dist.layout import ac_mode
from automodel_dist.limits import INTENT_SIZES, PIN_SIZES, WORLD_SIZE, check_size, check_sizes, path_exists
from automodel_dist.problem import DEFAULT_PEFT_RANK, Pins, Problem, TrainingSpec
from automodel_dist.resources import INTENT_SCHEMA
from automodel_dist.schema_check import ERROR, SchemaIssue, schema_issues
from automodel_dist.yamlio import (
    Document,
    InputLimitError,
    PathKey,
    join_path,
    load_document,
    load_value,
    lookup,
    split_path,
)

if TYPE_CHECKING:
    from automodel_dist.catalog.specs import GpuSpec

INT_PINS = ("tp", "pp", "vpp", "cp", "ep", "dp_replicate", "local_batch_size", "micro_batch_size")


@dataclass(frozen=True)
class Override:
    """One `a.b.c=value` command-line override, parsed; once applied, `written` is the shortest prefix of `path`
    it put into the document (a mapping it had to create, else the key it set): an error at or under it is the
    override's, not the file's."""

    text: str
    path: PathKey
    value: Any
    written: PathKey | None = None


@dataclass(frozen=True)
class Intent:
    """A schema-checked intent: the document (for positions) and its plain values with defaults applied."""

    document: Document
    values: dict[str, Any]
    overrides: tuple[Override, ...] = ()

    @property
    def model_ref(self) -> str | dict[str, Any]:
        """What `catalog.models.resolve_model` takes: an id/path string or an architecture mapping."""
        return self.values["model"]

    @property
    def local_model(self) -> Path | None:
        """The model's config.json or folder on disk (relative paths are the intent file's), if it names one."""
        ref = self.model_ref
        if not isinstance(ref, str):
            return None
        local = _relative_to_intent(self.document, ref)
        return local if path_exists(local) else None

    @property
    def gpu(self) -> str:
        return self.values["hardware"]["gpu"]

    @property
    def nodes(self) -> int:
        return self.values["hardware"]["nodes"]

    @property
    def gpus_per_node(self) -> int:
        return self.values["hardware"]["gpus_per_node"]

    @property
    def training(self) -> TrainingSpec:
        t = self.values["training"]
        peft = t.get("peft")
        return TrainingSpec(task=t["task"], seq_length=t["seq_length"], global_batch_size=t["global_batch_size"],
                            packed_sequences=t["packed_sequences"], precision=t["precision"],
                            peft_rank=peft["rank"] if peft else None, init=t["init"])

    @property
    def pins(self) -> Pins:
        return pins_from_mapping(self.values["parallelism"])

    @property
    def objective(self) -> str:
        return self.values["objective"]

    @property
    def memory_headroom(self) -> float:
        return self.values["memory_headroom"]

    @property
    def base_recipe(self) -> Path | None:
        """The base recipe path, resolved relative to the intent file (or the working directory)."""
        ref = self.values["base_recipe"]
        return None if ref is None else _relative_to_intent(self.document, ref)

    @property
    def launcher(self) -> dict[str, Any] | None:
        return self.values["launcher"]

    def written(self, dotted: str) -> bool:
        """The user gave `dotted` (in the file or as an override), rather than leaving it to its default."""
        path = tuple(dotted.split("."))
        return lookup(self.document.data, dotted)[0] or any(o.path == path for o in self.overrides)

    def where(self, path: str | PathKey) -> str:
        """file:line:col of a key, or the override that set it."""
        return _where(self.document, self.overrides, path)

    def input_paths(self) -> list[Path]:
        """The files this intent reads: itself, its base recipe, a local model file or folder's config.json."""
        paths = [] if self.document.filename.startswith("<") else [Path(self.document.filename)]
        if self.base_recipe is not None:
            paths.append(self.base_recipe)
        ref = self.model_ref.get("preset") if isinstance(self.model_ref, dict) else self.model_ref
        if isinstance(ref, str) and ref.strip():
            model = _relative_to_intent(self.document, ref.strip())
            paths.append(model / "config.json" if model.is_dir() else model)
        return [p for p in paths if _exists(p)]


def load_intent(source: str | Path | Mapping[str, Any], overrides: Iterable[str] = ()) -> Intent:
    """Load, override, schema-check and default an intent; raise one InputError listing every problem."""
    doc = load_document(source, what="intent")
    _refuse_duplicate_keys(doc)
    parsed = tuple(parse_override(text) for text in _override_texts(overrides))
    if parsed:
        doc = Document(data=copy.deepcopy(doc.data), filename=doc.filename)  # never touch the caller's mapping
        parsed = tuple(_apply_override(doc.data, override) for override in parsed)
    errors = [issue for issue in schema_issues(doc, INTENT_SCHEMA) if issue.severity == ERROR]
    if errors:
        raise _schema_error(doc, parsed, errors)
    values = doc.plain()
    _apply_defaults(values)
    intent = Intent(document=doc, values=values, overrides=parsed)
    _check_sizes(intent)
    _check_cross_fields(intent)
    return intent


def _override_texts(overrides: Any) -> tuple[str, ...]:
    """The API's `overrides`: an iterable of `key=value` strings (a lone string is one override too many
    ways to read, so it is refused)."""
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Iterable):
        raise InputError(f"overrides must be a list of 'key=value' strings, not {type(overrides).__name__}",
                         hint="e.g. overrides=['training.seq_length=8192']")
    texts = tuple(overrides)
    for text in texts:
        if not isinstance(text, str):
            raise InputError(f"each override must be a 'key=value' string, got {text!r}",
                             hint="e.g. overrides=['hardware.nodes=2']")
    return texts


def _refuse_duplicate_keys(doc: Document) -> None:
    """A key written twice in an intent is an error, not a warning as in a recipe: an intent is short and
    hand-written, so the repeat is a mistake, and one of two pins or sizes would vanish without a word
    (AutoModel's loader, which recipes must match, keeps the last; intents have no such constraint)."""
    if doc.duplicate_keys:
        dup = doc.duplicate_keys[0]
        raise InputError(f"key {dup.key!r} is written twice in the same mapping (here and again later)",
                         where=f"{doc.filename}:{dup.line}:{dup.col}", hint="delete one of the two")


def _check_sizes(intent: Intent) -> None:
    """Sizes no cluster or job can have (limits.py) are refused before the planner loops over them."""
    values = intent.values
    check_sizes(values, INTENT_SIZES, intent.where)
    for name, limit in PIN_SIZES.items():
        pin = values["parallelism"].get(name)
        for value in pin if isinstance(pin, list) else [pin]:
            check_size(value, limit, name=f"parallelism.{name}", where=intent.where(f"parallelism.{name}"))


def resolve_intent(intent: Intent) -> Problem:
    """Resolve the model and GPU presets into specs: everything the planner and cost model need."""
    from automodel_dist.catalog.models import resolve_model
    from automodel_dist.catalog.specs import ClusterSpec

    local = intent.local_model
    model_ref = str(local) if local is not None else intent.model_ref
    model = _located(lambda: resolve_model(model_ref), intent, "model")
    gpu = _gpu(intent)
    pins = intent.pins
    if not model.is_moe and pins.ep is not None and min(pins.ep) > 1:
        raise InputError(f"parallelism.ep pins expert parallelism {list(pins.ep)} but {model.name} is a dense model",
                         where=intent.where("parallelism.ep"),
                         hint="expert parallelism needs a MoE model; remove the pin or set `ep: 1`")
    cluster = ClusterSpec(gpu=gpu, nodes=intent.nodes, gpus_per_node=intent.gpus_per_node)
    return Problem(model=model, cluster=cluster, training=intent.training, pins=pins,
                   objective=intent.objective, memory_headroom=intent.memory_headroom)


def pins_from_mapping(parallelism: Mapping[str, Any]) -> Pins:
    """`parallelism:` values (auto | value | list) -> Pins (None | sorted tuple of allowed values)."""
    def allowed(name: str, spelling: Callable[[Any], Any] = lambda value: value) -> tuple | None:
        value = parallelism.get(name, "auto")
        if value == "auto":
            return None
        values = value if isinstance(value, list) else [value]
        return tuple(sorted({spelling(v) for v in values}))

    return Pins(strategy=allowed("strategy"), activation_checkpointing=allowed("activation_checkpointing", ac_mode),
                dispatcher=allowed("dispatcher"), **{name: allowed(name) for name in INT_PINS})


def parse_override(text: str) -> Override:
    """`a.b.c=value` -> Override; the value is a YAML scalar or flow collection (`[1, 2]`, `{rank: 8}`)."""
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not key.strip() or any(not p or not p.replace("_", "").replace("-", "").isalnum() for p in parts):
        raise InputError(f"bad override {text!r}: expected dotted.key=value", where=f"override {text!r}",
                         hint="write e.g. training.seq_length=8192 or parallelism.tp=[2,4]")
    if not raw.strip():
        raise InputError(f"bad override {text!r}: no value after '='", where=f"override {text!r}",
                         hint=f"give a value, e.g. {key.strip()}=8")
    try:
        value = load_value(raw)
    except InputLimitError as exc:
        raise exc.located(f"override {text!r}") from None
    except YAMLError as exc:
        raise InputError(f"bad override {text!r}: the value is not valid YAML ({exc.__class__.__name__})",
                         where=f"override {text!r}", hint="quote strings with ':' or '#' in them") from None
    return Override(text=text, path=tuple(parts), value=value)


def _apply_override(data: CommentedMap, override: Override) -> Override:
    """Set the override's value, creating the mappings on its path; return it with what it `written`."""
    node: Any = data
    written = override.path
    for depth, part in enumerate(override.path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = CommentedMap()
            if written == override.path:  # the first mapping it creates
                written = override.path[: depth + 1]
        elif isinstance(child, str) and override.path[:1] == ("model",) and depth == 0:
            # model.num_layers=16 on `model: <id>` means "this preset with that field overridden".
            child = node[part] = CommentedMap(preset=child)
        elif not isinstance(child, Mapping):
            where = join_path(override.path[: depth + 1])
            raise InputError(f"bad override {override.text!r}: {where} is not a mapping",
                             where=f"override {override.text!r}", hint=f"set {where} itself instead")
        node = child
    node[override.path[-1]] = override.value
    return replace(override, written=written)


def _apply_defaults(values: dict[str, Any]) -> None:
    """Fill what the schema leaves optional. gpus_per_node comes from the GPU preset."""
    hardware = values["hardware"]
    hardware.setdefault("nodes", 1)
    hardware.setdefault("gpus_per_node", None)  # None: the GPU preset's, filled in by _fill_gpus_per_node
    training = values["training"]
    training.setdefault("task", "sft")
    training.setdefault("init", "pretrained")
    if training.get("packed_sequences") is None:
        training["packed_sequences"] = training["task"] == "pretrain"
    training.setdefault("precision", "bf16")
    if training["task"] == "peft":
        training["peft"] = {"rank": DEFAULT_PEFT_RANK, **(training.get("peft") or {})}
    parallelism = values.setdefault("parallelism", {})
    for name in ("strategy", "activation_checkpointing", *INT_PINS):
        parallelism.setdefault(name, "auto")
    values.setdefault("objective", "throughput")
    values.setdefault("memory_headroom", 0.1)
    values.setdefault("base_recipe", None)
    values.setdefault("launcher", None)


def _check_cross_fields(intent: Intent) -> None:
    """What the schema cannot say: peft settings without peft, node sizes vs the preset, pin contradictions."""
    values = intent.values
    training = values["training"]
    if "peft" in training and training["task"] != "peft":
        raise InputError(f"training.peft is set but training.task is {training['task']!r}",
                         where=intent.where("training.peft"),
                         hint="set `task: peft` to train LoRA adapters, or remove the `peft:` block")
    if training["init"] == "from_scratch" and training["task"] == "peft":
        raise InputError("training.init is from_scratch but training.task is peft: LoRA adapts pretrained weights",
                         where=intent.where("training.init"),
                         hint="use `init: pretrained` for LoRA, or `task: pretrain` to train a new model from scratch")
    pins = intent.pins
    if pins.pp == (1,) and pins.vpp is not None and min(pins.vpp) > 1:
        raise InputError(f"parallelism.vpp pins {list(pins.vpp)} virtual stages but pp is pinned to 1",
                         where=intent.where("parallelism.vpp"),
                         hint="virtual pipeline stages need pp > 1; unpin pp or set `vpp: 1`")
    if pins.micro_batch_size and pins.local_batch_size and min(pins.micro_batch_size) > max(pins.local_batch_size):
        raise InputError("parallelism.micro_batch_size is larger than every allowed local_batch_size",
                         where=intent.where("parallelism.micro_batch_size"),
                         hint="a pipeline micro batch is a slice of the local batch; lower it or raise the local batch")
    base = intent.base_recipe
    if base is not None and not path_exists(base):
        raise InputError(f"base recipe not found: {base}", where=intent.where("base_recipe"),
                         hint="a relative base_recipe is read relative to the intent file")
    _fill_gpus_per_node(intent)


def _fill_gpus_per_node(intent: Intent) -> None:
    hardware = intent.values["hardware"]
    gpu = _gpu(intent)
    if hardware["gpus_per_node"] is None:
        hardware["gpus_per_node"] = gpu.gpus_per_node
    elif hardware["gpus_per_node"] > gpu.gpus_per_node:
        raise InputError(f"hardware.gpus_per_node is {hardware['gpus_per_node']} but a {gpu.name} node has "
                         f"{gpu.gpus_per_node} GPUs", where=intent.where("hardware.gpus_per_node"),
                         hint=f"use at most {gpu.gpus_per_node}, or add nodes instead")
    world = hardware["nodes"] * hardware["gpus_per_node"]
    check_size(world, WORLD_SIZE, name=f"the world size (hardware.nodes × gpus_per_node = {hardware['nodes']} × "
               f"{hardware['gpus_per_node']})", where=intent.where("hardware.nodes"))


def _gpu(intent: Intent) -> GpuSpec:
    """The intent's GPU preset (loading fills gpus_per_node from it, resolving builds the cluster)."""
    from automodel_dist.catalog.hardware import get_gpu

    return _located(lambda: get_gpu(intent.gpu), intent, "hardware.gpu")


def _located(call: Any, intent: Intent, path: str) -> Any:
    """Run a catalog lookup; an InputError it raises without a position gets the intent key's position."""
    try:
        return call()
    except InputError as exc:
        # The catalog names the dotted key it judged ("model", "model.num_layers"): point into the file.
        key = exc.where if exc.where and (exc.where == path or exc.where.startswith(path + ".")) else None
        if exc.where is None or key:
            raise InputError(f"{key or path}: {exc.message}", where=intent.where(key or path),
                             hint=exc.hint) from None
        raise


def _schema_error(doc: Document, overrides: tuple[Override, ...], issues: list[SchemaIssue]) -> InputError:
    def line(issue: SchemaIssue) -> str:
        return f"{_where(doc, overrides, issue.path)}: {issue.dotted}: {issue.message}"

    first = issues[0]
    if len(issues) == 1:
        return InputError(f"{first.dotted}: {first.message}", where=_where(doc, overrides, first.path),
                          hint=first.hint)
    listing = "\n".join(f"  - {line(i)}\n    hint: {i.hint}" for i in issues)
    return InputError(f"{len(issues)} problems in the intent:\n{listing}", where=_where(doc, overrides, first.path),
                      hint="fix each problem listed above (`automodel-dist schema intent` prints the full schema)")


def _where(doc: Document, overrides: tuple[Override, ...], path: str | PathKey) -> str:
    keys = split_path(path) if isinstance(path, str) else tuple(path)
    for override in reversed(overrides):
        written = override.written or override.path
        if keys[: len(written)] == written:
            return f"override {override.text!r}"
    return doc.where(keys)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long, or with a NUL in it, names no file
        return False


def _relative_to_intent(doc: Document, ref: str) -> Path:
    path = Path(ref).expanduser()
    if path.is_absolute() or doc.filename.startswith("<"):
        return path
    return Path(doc.filename).parent / path
