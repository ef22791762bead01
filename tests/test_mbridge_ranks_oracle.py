"""The megatron-bridge report's rank groups (targets/megatron_bridge/ranks.py) against Megatron Core 0.19.2's
own `RankGenerator`, in the order Megatron-Bridge keeps (tp-cp-ep-dp-pp): every group of every axis."""

from __future__ import annotations

import json
import subprocess

import pytest
from mbridge_oracle import ORACLE_PYTHON, available

from automodel_dist.targets.megatron_bridge.parse import megatron_layout
from automodel_dist.targets.megatron_bridge.ranks import plan_ranks

pytestmark = [
    pytest.mark.mbridge_oracle,
    pytest.mark.skipif(not available(), reason="the Megatron-Bridge oracle venv (.venv-mb) is not installed: "
                                                "run scripts/setup-mbridge-oracle.sh"),
]

# (world, tp, pp, cp, ep, etp): dense, CP, EP folded over TP·CP·DP, ETP, and a tuned DeepSeek-V3 shape.
SIZES = [(8, 2, 1, 1, 1, 1), (16, 2, 2, 2, 1, 1), (32, 1, 2, 2, 8, 1), (64, 2, 2, 1, 16, 2), (48, 2, 3, 2, 4, 1),
         (256, 2, 4, 1, 32, 1), (1024, 1, 8, 1, 64, 1)]
# Our axis name -> (MCore generator, its token): dense ranks from the decoder generator, experts from the
# expert generator (tp = etp, dp = expert dp, cp = 1).
AXES = {"tp": ("dense", "tp"), "cp": ("dense", "cp"), "dp": ("dense", "dp"), "pp": ("dense", "pp"),
        "dp_cp": ("dense", "dp-cp"), "ep": ("expert", "ep"), "etp": ("expert", "tp"), "ep_shard": ("expert", "dp")}
WORKER = """
import json, sys, warnings
warnings.simplefilter("ignore")
from megatron.core.parallel_state import RankGenerator
out = []
for world, tp, pp, cp, ep, etp in json.loads(sys.stdin.read()):
    dense = RankGenerator(tp=tp, ep=1, dp=world // (tp * pp * cp), pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (pp * ep * etp), pp=pp, cp=1, order="tp-cp-ep-dp-pp")
    gens = {"dense": dense, "expert": expert}
    out.append({name: gens[g].get_ranks(token) for name, (g, token) in json.loads(sys.argv[1]).items()})
print(json.dumps(out))
"""


def test_every_group_is_megatron_cores() -> None:
    done = subprocess.run([str(ORACLE_PYTHON), "-c", WORKER, json.dumps(AXES)], input=json.dumps(SIZES),
                          capture_output=True, text=True, check=True, timeout=300)
    theirs = json.loads(done.stdout)
    compared = 0
    for (world, tp, pp, cp, ep, etp), groups in zip(SIZES, theirs, strict=True):
        plan = plan_ranks(megatron_layout(world, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp))
        ours = {axis.name for axis in plan.axes}
        # without CP, dp_cp is dp; without EP or ETP no expert grid is drawn (experts follow the dense layout)
        absent = ({"dp_cp"} if cp == 1 else set()) | ({"ep", "etp", "ep_shard"} if ep == etp == 1 else set())
        assert ours == set(AXES) - absent
        for name, mcore_groups in groups.items():
            if name in absent:
                continue
            assert sorted(map(sorted, plan.groups(name))) == sorted(map(sorted, mcore_groups)), (name, world, tp, pp)
            compared += 1
    assert compared >= 5 * len(SIZES)
