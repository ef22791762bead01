"""Dry-run speed: a 16384-rank FSDP2 + EP mesh, whole process, ours against AutoModel 0.7.0's own builder.

Ours: `automodel-dist dry-run recipe.yaml --nodes 2048 --format json`, which builds the meshes under torch's
fake process group and writes every group of every axis (about 180 000 ranks in 11 tables). Theirs:
AutoModel's `create_distributed_setup_from_config` on the same `distributed:` section under the same fake
group, which builds rank 0's meshes only. Each is timed as a whole process (Python start, imports, build,
output), run 3 times, median taken. Ours must be no slower than 1.5 times theirs.

Run: python benchmarks/dry_run_speed.py   (needs torch and the --no-deps nemo-automodel==0.7.0 install)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NODES, GPUS_PER_NODE = 2048, 8
WORLD = NODES * GPUS_PER_NODE
SECTION = {"strategy": "fsdp2", "pp_size": 8, "dp_replicate_size": 8, "tp_size": 4, "cp_size": 2, "ep_size": 32,
           "pipeline": {}}
RECIPE = "recipe: TrainFinetuneRecipeForNextTokenPrediction\ndistributed:\n" + "".join(
    f"  {key}: {json.dumps(value)}\n" for key, value in SECTION.items())
RUNS = 3
LIMIT = 1.5

THEIRS = f"""
import sys, yaml, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from nemo_automodel.recipes._dist_utils import create_distributed_setup_from_config
section = yaml.safe_load(open(sys.argv[1]))["distributed"]
dist.init_process_group("fake", rank=0, world_size={WORLD}, store=FakeStore())
setup = create_distributed_setup_from_config({{"distributed": section}}, world_size={WORLD})
mc = setup.mesh_context
print(tuple(mc.device_mesh.shape), tuple(mc.moe_mesh.shape))
dist.destroy_process_group()
"""


def timed(cmd: list[str], out: Path) -> float:
    start = time.perf_counter()
    with out.open("w") as sink:
        subprocess.run(cmd, check=True, stdout=sink, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def check_ours(out: Path) -> int:
    """Every axis lists every rank exactly once; returns the number of ranks listed over all tables."""
    data = json.loads(out.read_text())
    assert data["ok"] and data["device_mesh"]["shape"] == [8, 8, 32, 2, 4] and data["moe_mesh"]["shape"] == [64, 32]
    listed = 0
    for name, axis in data["axes"].items():
        ranks = sorted(r for group in axis["groups"] for r in group)
        assert ranks == list(range(WORLD)), name
        listed += len(ranks)
    return listed


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "recipe.yaml"
        recipe.write_text(RECIPE)
        ours_cmd = [sys.executable, "-m", "automodel_dist", "dry-run", str(recipe), "--nodes", str(NODES),
                    "--gpus-per-node", str(GPUS_PER_NODE), "--format", "json"]
        theirs_cmd = [sys.executable, "-c", THEIRS, str(recipe)]
        ours_out, theirs_out = Path(tmp) / "ours.json", Path(tmp) / "theirs.txt"
        ours_times, theirs_times = [], []
        for _ in range(RUNS):  # interleaved, so machine noise hits both alike
            ours_times.append(timed(ours_cmd, ours_out))
            theirs_times.append(timed(theirs_cmd, theirs_out))
        listed = check_ours(ours_out)
        theirs_shapes = theirs_out.read_text().strip()
    ours_s, theirs_s = statistics.median(ours_times), statistics.median(theirs_times)
    ratio = ours_s / theirs_s
    print(f"mesh: {WORLD} ranks, {SECTION}")
    print(f"ours   (automodel-dist dry-run, every group of all 11 axes, {listed} ranks listed, JSON): "
          f"median {ours_s:.2f} s of {', '.join(f'{t:.2f}' for t in ours_times)}")
    print(f"theirs (AutoModel create_distributed_setup_from_config, rank 0's meshes {theirs_shapes}): "
          f"median {theirs_s:.2f} s of {', '.join(f'{t:.2f}' for t in theirs_times)}")
    verdict = "OK" if ratio <= LIMIT else "TOO SLOW"
    print(f"ratio ours/theirs: {ratio:.2f} (limit {LIMIT}) {verdict}")
    return 0 if ratio <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
