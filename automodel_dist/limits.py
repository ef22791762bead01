"""Input limits, in one place: what a file, a document and a size may be before the tool works on it.

Inputs are untrusted. A FIFO or a device must not hang a run, an alias bomb or a 50 MB file must not
take minutes, a deep nesting must not end in a RecursionError, and a size no cluster or model can have
(10**12 layers, 10**8 nodes) must not send the planner into loops over it. Each limit is checked once,
where the input comes in (reading a file, loading a document, loading an intent, reading a model), never
per layout, and each is set well above the largest real system so that no real config is refused; the
comment on each says why that number.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from automodel_dist.errors import InputError

# -- files and documents ---------------------------------------------------------------------------------

# Every file the tool reads (intent, recipe, base recipe, sbatch script, config.json, model file) is a
# hand-written or published text file of a few KiB: AutoModel's largest example recipe is under 10 KiB,
# DeepSeek-V3's config.json under 2 KiB, the largest multimodal config.json files tens of KiB. 256 KiB is
# above all of them, and the round-trip YAML parser (a few hundred KiB/s) reads it in about a second.
MAX_FILE_BYTES = 1 << 18
# Values in one document, aliases expanded (each scalar, list and mapping counts one). A full recipe has a
# few hundred. The round-trip parser composes about 10,000 values a second on a busy machine, so 10,000
# keeps a load near a second, and a billion-laughs bomb is refused at the first alias that would pass it,
# before anything is expanded.
MAX_DOCUMENT_NODES = 10_000
# Nesting levels. Recipes nest about 6 deep (model.backend.x.y); 50 leaves plenty of room and keeps
# every recursive walk (the YAML composer, jsonschema's ~10 frames a level) under Python's 1000 frames.
MAX_NESTING = 50
# Digits of an integer literal. 2**64 has 20 digits; no setting of a recipe or model needs more than that.
# 100 refuses what Python itself refuses past 4300 digits, with a located message instead of a traceback.
MAX_INT_DIGITS = 100

# -- sizes (each maximum is inclusive) --------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """The largest value a size may take, and why that is beyond any real system."""

    maximum: int
    why: str


# The largest GPU cluster built so far (xAI's Colossus) holds about 200,000 GPUs; 2**18 is above it.
# Compile stays near a second at this size and dry-run builds its meshes in about half a minute.
WORLD_SIZE = Limit(1 << 18, "the largest GPU cluster built has about 200,000 GPUs")
# A node (one OS instance, one torchrun) holds 4 to 8 GPUs; the largest NVLink domain announced (NVL576)
# is 576 GPUs. 1024 is above both.
GPUS_PER_NODE = Limit(1024, "a node has 4 to 8 GPUs, the largest NVLink domain 576")
# Llama 4 trains toward a 10M-token context; 2**24 (16.8M) is above any context length trained so far.
SEQ_LENGTH = Limit(1 << 24, "the longest context trained for is about 10M tokens")
# Global batches of real runs are at most a few thousand sequences (16M tokens at 4k-8k tokens each);
# 2**20 sequences is hundreds of times that.
BATCH = Limit(1 << 20, "real global batches are a few thousand sequences")
# The deepest published LLMs have 126-160 layers; 16,384 is a hundred times that.
LAYERS = Limit(1 << 14, "the deepest published models have about 160 layers")
# Published widths: hidden up to ~25k (PaLM 18,432; Llama 3.1 405B 16,384), FFN up to ~74k (PaLM
# 73,728), vocabularies up to ~262k (Gemma 3). 2**20 is above every one of them.
WIDTH = Limit(1 << 20, "the widest published layer (an FFN) is about 74k")
VOCAB = Limit(1 << 24, "the largest published vocabularies have about 262k tokens")
# DeepSeek-V3 and Llama 3.1 405B have 128 query heads; 2**16 is far above.
HEADS = Limit(1 << 16, "published models have at most 128 attention heads")
# Kimi K2 has 384 routed experts, DeepSeek-V3 256; 2**16 is far above.
EXPERTS = Limit(1 << 16, "the most experts published is 384 (Kimi K2)")

# Where each limit applies: intent keys (dotted) and ModelSpec fields (also the config.json keys that
# feed them are checked under their own names as they are read).
INTENT_SIZES: dict[str, Limit] = {
    "hardware.nodes": WORLD_SIZE,
    "hardware.gpus_per_node": GPUS_PER_NODE,
    "training.seq_length": SEQ_LENGTH,
    "training.global_batch_size": BATCH,
    "training.peft.rank": WIDTH,
}
# Parallelism pins: a degree is at most the world; a batch pin at most the global batch limit.
PIN_SIZES: dict[str, Limit] = {
    **{name: WORLD_SIZE for name in ("tp", "pp", "cp", "ep", "dp_replicate")},
    "vpp": LAYERS,
    "local_batch_size": BATCH,
    "micro_batch_size": BATCH,
}
# Recipe keys (validate, dry-run): the same bounds, on AutoModel's names.
RECIPE_SIZES: dict[str, Limit] = {
    **{f"distributed.{name}": WORLD_SIZE for name in ("tp_size", "pp_size", "cp_size", "ep_size", "dp_size",
                                                       "dp_replicate_size")},
    "step_scheduler.global_batch_size": BATCH,
    "step_scheduler.local_batch_size": BATCH,
    "distributed.pipeline.pp_microbatch_size": BATCH,
    "distributed.pipeline.layers_per_stage": LAYERS,
    "packed_sequence.packed_sequence_size": SEQ_LENGTH,
    "dataset.seq_length": SEQ_LENGTH,
}
MODEL_SIZES: dict[str, Limit] = {
    "num_layers": LAYERS, "first_dense_layers": LAYERS, "linear_attention_layers": LAYERS,
    "sliding_window_layers": LAYERS,
    "hidden_size": WIDTH, "intermediate_size": WIDTH, "moe_intermediate_size": WIDTH,
    "shared_expert_intermediate_size": WIDTH, "head_dim": WIDTH, "q_lora_rank": WIDTH, "kv_lora_rank": WIDTH,
    "qk_nope_head_dim": WIDTH, "qk_rope_head_dim": WIDTH, "v_head_dim": WIDTH, "linear_key_head_dim": WIDTH,
    "linear_value_head_dim": WIDTH, "linear_conv_kernel_dim": WIDTH,
    "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "linear_num_key_heads": HEADS,
    "linear_num_value_heads": HEADS,
    "num_routed_experts": EXPERTS, "num_shared_experts": EXPERTS, "experts_per_token": EXPERTS,
    "vocab_size": VOCAB, "sliding_window": SEQ_LENGTH,
}


def check_size(value: Any, limit: Limit, *, name: str, where: str | None) -> None:
    """An InputError when an integer `value` of `name` passes `limit` (other types are the caller's)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > limit.maximum:
        raise InputError(f"{name} is {_show_int(value)}, above the limit of {limit.maximum:,} ({limit.why})",
                         where=where, hint=f"use a value of at most {limit.maximum:,}")


def check_sizes(values: Mapping[str, Any], table: Mapping[str, Limit], where: Callable[[str], str]) -> None:
    """Each dotted key of `table` present in `values` against its limit; `where(dotted)` locates it."""
    for dotted, limit in table.items():
        node: Any = values
        for key in dotted.split("."):
            node = node.get(key) if isinstance(node, Mapping) else None
        check_size(node, limit, name=dotted, where=where(dotted))


def check_model_size(field: str, value: Any, where: str, *, name: str | None = None) -> None:
    """A model architecture field (ModelSpec name) against its limit, if it has one; `name` is the key
    as the user wrote it (a config.json's num_hidden_layers for num_layers)."""
    limit = MODEL_SIZES.get(field)
    if limit is not None:
        check_size(value, limit, name=name or field, where=where)


def _show_int(value: int) -> str:
    digits = len(str(value)) if value < 10 ** MAX_INT_DIGITS else None
    # no thousands separators: a value from ${VAR} must read exactly as given, for validate to redact it
    return str(value) if digits is not None and digits <= 24 else f"an integer of {digits or 'over 100'} digits"


def check_world(world_size: Any, gpus_per_node: Any) -> None:
    """The world the API is asked to judge (validate, dry-run): positive integers within the limits."""
    hint = "pass --nodes N and --gpus-per-node G (world size = N × G)"
    check_count(gpus_per_node, GPUS_PER_NODE, name="GPUs per node", hint=hint)
    check_count(world_size, WORLD_SIZE, name="world size", hint=hint)


def check_count(value: Any, limit: Limit, *, name: str, hint: str) -> None:
    """A count the API takes (world size, GPUs per node, NVLink domain): an int from 1 to the limit."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}", hint=hint)
    check_size(value, limit, name=name, where=None)


def check_text_size(text: str, *, what: str, where: str) -> None:
    """Text handed over in memory (YAML, a script) is held to the file limit too."""
    if len(text) > MAX_FILE_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise _too_big(what, where, f"{len(text):,} characters")


# -- reading files -----------------------------------------------------------------------------------------


def read_text_file(path: str | Path, *, what: str, expected: str) -> str:
    """The UTF-8 text of a file the user named: a regular file of at most MAX_FILE_BYTES. Anything else is
    an InputError saying `what` it was meant to be and what to pass instead (`expected`, e.g. "a .yaml file").

    A FIFO, device or socket is refused without waiting on it: the file is opened non-blocking and judged
    by the descriptor's own stat (so a file swapped between a check and the open cannot slip through).
    """
    filename = str(path)
    if "\0" in filename:
        raise InputError(f"{what} path contains a NUL character", where=repr(filename), hint=f"pass {expected}")
    try:
        fd = os.open(filename, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{what} not found", where=filename,
                         hint=f"pass {expected}; a relative path is read from the current directory") from None
    except IsADirectoryError:
        raise InputError(f"{what} path is a directory", where=filename, hint=f"pass {expected}") from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.__class__.__name__}: {exc.strerror or exc}", where=filename,
                         hint="make the file readable") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{what} path is a directory", where=filename, hint=f"pass {expected}")
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{what} is not a regular file (it is a {file_kind(info.st_mode)})", where=filename,
                             hint=f"pass {expected}; pipes, devices and sockets are not read")
        if info.st_size > MAX_FILE_BYTES:
            raise _too_big(what, filename, f"{info.st_size:,} bytes")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            fd = -1  # the file object owns it now
            data = handle.read(MAX_FILE_BYTES + 1)  # a file that grows while read is cut here
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.__class__.__name__}: {exc.strerror or exc}", where=filename,
                         hint="make the file readable") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise _too_big(what, filename, f"more than {MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"cannot read {what}: it is not UTF-8 text (byte {exc.start} is not valid UTF-8)",
                         where=f"{filename}:{line}", hint="save the file as UTF-8 text") from None


def path_exists(text: str | Path) -> bool:
    """Whether a user-given string names an existing path; a NUL or a name too long for the file system
    (where `Path.exists` raises) is no path."""
    try:
        return Path(text).expanduser().exists()
    except (OSError, ValueError):
        return False


def _too_big(what: str, filename: str, size: str) -> InputError:
    return InputError(f"{what} is {size}, above the limit of {MAX_FILE_BYTES:,} bytes (256 KiB; real ones are a "
                      "few KiB)", where=filename, hint=f"pass the {what} itself, not a larger file")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words (for messages refusing to read or write it)."""
    kinds = ((stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")


# -- in-memory data (the Python API's mappings, parsed JSON) -------------------------------------------


def check_tree(data: Any, *, where: str) -> None:
    """A mapping handed to the API (or parsed from JSON) under the YAML documents' limits: no cycle, at most
    MAX_NESTING deep and MAX_DOCUMENT_NODES values (a shared subtree counts each time it is used), plain keys
    and integers of at most MAX_INT_DIGITS digits. Iterative, so a deep or cyclic structure cannot exhaust
    the stack."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "")]
    open_ids: set[int] = set()
    seen = 0
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, _Close):
            open_ids.discard(node.id)
            continue
        seen += 1
        here = f"{where}: {path}" if path else where
        if seen > MAX_DOCUMENT_NODES:
            raise InputError(f"more than {MAX_DOCUMENT_NODES:,} values (the limit; real ones have a few hundred)",
                             where=where, hint="pass the configuration itself, not generated data")
        if depth > MAX_NESTING:
            raise InputError(f"nested more than {MAX_NESTING} levels deep (the limit; real ones nest about 6)",
                             where=here, hint="flatten the structure")
        if isinstance(node, int) and not isinstance(node, bool) and abs(node) >= 10 ** MAX_INT_DIGITS:
            raise InputError(f"an integer of more than {MAX_INT_DIGITS} digits", where=here,
                             hint="no setting needs an integer that large")
        if isinstance(node, (Mapping, list, tuple)):
            if id(node) in open_ids:
                raise InputError("the structure contains itself (a cycle)", where=here,
                                 hint="pass a tree of plain values: each mapping and list in one place")
            open_ids.add(id(node))  # shared subtrees are fine; only a node inside itself is a cycle
            stack.append((_Close(id(node)), depth, path))
            items = node.items() if isinstance(node, Mapping) else enumerate(node)
            for key, value in items:
                if isinstance(node, Mapping) and not (key is None or isinstance(key, (str, int, float, bool))):
                    raise InputError(f"a mapping key must be a string or a number, not a {type(key).__name__}",
                                     where=here, hint="use plain keys")
                stack.append((value, depth + 1, f"{path}.{key}" if path else str(key)))


@dataclass(frozen=True)
class _Close:
    """Marks the end of a container on check_tree's stack (its id leaves the open set)."""

    id: int


def is_finite_number(value: Any) -> bool:
    """int or float (not bool) that is neither NaN nor infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, float) or math.isfinite(value)
