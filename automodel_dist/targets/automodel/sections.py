"""The top-level sections of an AutoModel recipe, to catch one AutoModel would silently ignore.

AutoModel reads a recipe's top-level sections by name and never checks for keys it does not read, so a
misspelled section changes the run without a word: `step_schedular:` trains with StepScheduler's defaults,
`pefft:` fine-tunes every weight. Sources:

- `READ_SECTIONS`: the names AutoModel 0.7.0's recipes read from the whole config (`self.cfg.X`,
  `self.cfg.get("X")`, `"X" in self.cfg`, `self._raw.get("X")` in `nemo_automodel/recipes/`), and the
  sections its `automodel` CLI takes (`cli/app.py`: recipe, skypilot, nemo_run). tests/test_rules.py checks
  the first list against the installed AutoModel.
- `EXAMPLE_SECTIONS`: the other top-level keys of AutoModel's 511 example recipes (NVIDIA-NeMo/Automodel
  `examples/`, commit 36044ad3d, 2026-08-22): sections a recipe class reads through a helper, or that its
  CI and benchmark scripts read (`ci`, `benchmark`), or that no 0.7.0 code reads (`rng`), but that users
  copy and must not be called misspellings.
"""

from __future__ import annotations

import difflib

READ_SECTIONS = frozenset({
    "checkpoint", "clip_grad_norm", "comet", "compile", "data", "dataloader", "dataset", "ddp",
    "diffusion_dataloader", "diffusion_validation_dataloader", "dist_env", "distill_loss", "distill_loss_weight",
    "distributed", "dllm", "domain_mixture", "ema", "embedding_row_repair", "flow_matching", "fp8",
    "freeze_config", "fsdp", "infonce_distill_loss", "infonce_loss", "intermediate_loss",
    "intermediate_loss_weight", "kd_loss_fn", "kd_ratio", "layer_pairs", "loss_fn", "lr_scheduler",
    "measure_flops", "measure_flops_after", "mfu", "mining", "mlflow", "model", "moe_metrics", "mse_loss",
    "mse_loss_weight", "mtp", "nce_distill_loss_weight", "nce_loss_weight", "neftune", "nvtx",
    "offload_teacher_model", "optimizer", "packed_sequence", "peft", "performance", "prewarm", "processor",
    "projection_lr", "qat", "quantization", "recipe_args", "score_loss", "score_loss_weight",
    "score_temperature", "sdpa_method", "seed", "step_scheduler", "teacher_distributed",
    "teacher_freeze_config", "teacher_model", "temperature", "tokenizer", "tool_call_eval", "val_dataset",
    "validation_dataloader", "validation_dataloaders", "validation_dataset", "vlm_dataloader",
    "vlm_validation_dataloader", "wandb",
    "recipe", "skypilot", "nemo_run",
})
EXAMPLE_SECTIONS = frozenset({
    "autocast", "autopipeline", "benchmark", "ci", "datasets", "dflash", "distributed_config", "inference",
    "longalign", "output", "parallelizer", "rng", "separate_meshes", "vae",
})
KNOWN_SECTIONS = READ_SECTIONS | EXAMPLE_SECTIONS
# `_typed_config.validation_dataloaders` takes every top-level key that starts with `validation_dataset`
# (one validation set each), and the matching `validation_dataloader...` key beside it.
PREFIXES = ("validation_dataset", "validation_dataloader")
SIMILARITY = 0.8  # difflib ratio: one letter off in a name of five or more ("distenv" ~ "dist_env": 0.93)


def misspelled_section(key: str) -> str | None:
    """The known section a top-level `key` AutoModel does not read most likely means, or None when the key
    is read, private (`_anchor:`), or like no section (a user's own block, e.g. for YAML anchors)."""
    if key in KNOWN_SECTIONS or key.startswith(("_", *PREFIXES)):
        return None
    folded = key.lower().replace("-", "_")
    if folded in KNOWN_SECTIONS:
        return folded
    matches = difflib.get_close_matches(folded, sorted(KNOWN_SECTIONS), n=1, cutoff=SIMILARITY)
    return matches[0] if matches else None
