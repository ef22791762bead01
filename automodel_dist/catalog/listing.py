"""`automodel-dist presets models|hardware`: the catalogs as a table or as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from automodel_dist.catalog.hardware import gpu_presets
from automodel_dist.catalog.models import list_models
from automodel_dist.catalog.params import param_counts
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError


def human_count(n: float) -> str:
    """8030261248 -> '8.03B'; 1.03e12 -> '1.03T'."""
    return f"{n / 1e12:.3g}T" if n >= 1e12 else f"{n / 1e9:.3g}B"


def _experts(spec: ModelSpec) -> str:
    if not spec.is_moe:
        return "-"
    text = f"{spec.num_routed_experts} top-{spec.experts_per_token}"
    return text + (f" +{spec.num_shared_experts} shared" if spec.num_shared_experts else "")


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def _models(fmt: str) -> str:
    presets = list_models()
    if fmt == "json":
        items: list[dict[str, Any]] = []
        for p in presets:
            counts = param_counts(p.spec)
            items.append({
                "id": p.id,
                "aliases": [a.id for a in p.aliases],
                "spec": asdict(p.spec),
                "params": {"total": counts.total, "active": counts.active, "expert_total": counts.expert_total,
                           "non_expert_total": counts.non_expert_total, "embedding": counts.embedding},
            })
        return json.dumps(items, indent=2) + "\n"
    rows = []
    for p in presets:
        s, counts = p.spec, param_counts(p.spec)
        rows.append([p.id, s.family, str(s.num_layers), str(s.hidden_size),
                     f"{s.num_attention_heads}/{s.num_key_value_heads}", _experts(s), human_count(counts.total),
                     human_count(counts.active), ", ".join(a.id for a in p.aliases)])
    header = ["id", "family", "layers", "hidden", "heads q/kv", "experts", "total", "active", "aliases"]
    note = ("\nactive: parameters one token touches (top-k experts, embedding and LM head included).\n"
            "An -Instruct or -Base suffix of any alias resolves too; a config.json path is read offline.\n")
    return _table(header, rows) + note


def _hardware(fmt: str) -> str:
    presets = gpu_presets()
    if fmt == "json":
        return json.dumps([{"id": p.spec.name, "aliases": list(p.aliases), **asdict(p.spec)} for p in presets],
                          indent=2) + "\n"
    rows = []
    for p in presets:
        g = p.spec
        rows.append([g.name, f"{g.hbm_gib:g} GiB ({g.hbm_vendor_gb:g} GB)", f"{g.tflops_bf16:g}",
                     f"{g.tflops_fp8:g}" if g.supports_fp8 else "-", str(g.gpus_per_node), str(g.nvlink_domain),
                     f"{g.nvlink_gbps:g}", f"{g.internode_gbps:g}", g.compute_capability])
    header = ["id", "HBM", "BF16 TFLOP/s", "FP8 TFLOP/s", "GPUs/node", "NVLink domain", "NVLink GB/s",
              "inter-node GB/s", "CC"]
    note = ("\nTFLOP/s dense (no sparsity). Bandwidths per GPU, one direction. HBM as the driver reports it,\n"
            "vendor label in parentheses.\n")
    return _table(header, rows) + note


def render_presets(which: str, fmt: str = "text") -> str:
    """The model or hardware catalog as a text table or JSON."""
    if fmt not in ("text", "json"):
        raise InputError(f"unknown format {fmt!r}", hint="use text or json")
    if which == "models":
        return _models(fmt)
    if which == "hardware":
        return _hardware(fmt)
    raise InputError(f"unknown preset kind {which!r}", hint="use models or hardware")
