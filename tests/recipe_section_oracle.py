"""Test oracle: AutoModel 0.7.0's own parsers for the recipe sections the recipe schema makes strict.

For each recipe it runs, in a worker process (AutoModel imports torch; the test process stays clean):
- `distributed`: ConfigNode (env resolution, "none"/"True" translation) then `parse_distributed_section`,
  which builds the strategy config, `PipelineConfig` (pp_size > 1) and `MoEParallelizerConfig` (ep_size > 1),
  then torch's `get_schedule_class` on the schedule name, as `AutoPipeline.build` does;
- `packed_sequence`: `make_packing_config`, exactly as the LLM recipe calls it (only when packed_sequence_size > 0).
The answer per recipe and section is None (accepted) or "ExceptionType: message".
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

_WORKER = r"""
import json, sys, types, warnings
warnings.filterwarnings("ignore")
# AutoModel is installed --no-deps: torchdata (imported by its dataloader module, unused by the packing
# config) is absent, so the worker gives that module the two names it imports.
if "torchdata" not in sys.modules:
    import torch.utils.data as tud
    for name in ("torchdata", "torchdata.stateful_dataloader", "torchdata.stateful_dataloader.sampler"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["torchdata.stateful_dataloader"].StatefulDataLoader = tud.DataLoader
    sys.modules["torchdata.stateful_dataloader.sampler"].StatefulDistributedSampler = tud.DistributedSampler
from nemo_automodel.components.config.loader import ConfigNode
from nemo_automodel.components.datasets.loader import make_packing_config
from nemo_automodel.recipes._dist_utils import parse_distributed_section
from torch.distributed.pipelining.schedules import get_schedule_class

def verdict(call):
    try:
        call()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

def distributed(section):
    section = {k: v for k, v in section.items() if k != "_target_"}  # AutoModel drops it; it need not import here
    parsed = parse_distributed_section(ConfigNode(section).to_dict())
    pipeline = parsed["pipeline_config"]
    if pipeline is not None and pipeline.pp_schedule is not None:
        get_schedule_class(pipeline.pp_schedule)  # what AutoPipeline.build does with the name (R32)

def packing(section):
    size = ConfigNode({"size": section.get("packed_sequence_size", 0)}).to_dict()["size"] or 0
    if size > 0:  # the LLM recipe builds a packing config only then (VLM recipes use other keys)
        ps = ConfigNode(section).to_dict()
        make_packing_config(ps.pop("packing_strategy", "thd"), ps)

answers = {}
for name, recipe in json.load(sys.stdin).items():
    answers[name] = {}
    if isinstance(recipe.get("distributed"), dict):
        answers[name]["distributed"] = verdict(lambda: distributed(recipe["distributed"]))
    if isinstance(recipe.get("packed_sequence"), dict):
        answers[name]["packed_sequence"] = verdict(lambda: packing(recipe["packed_sequence"]))
json.dump(answers, sys.stdout)
"""


def automodel_section_verdicts(recipes: dict[str, dict[str, Any]]) -> dict[str, dict[str, str | None]]:
    """{recipe name: {section: None | error}} from AutoModel's own parsers (one worker process for all)."""
    done = subprocess.run([sys.executable, "-c", _WORKER], input=json.dumps(recipes), capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout)
