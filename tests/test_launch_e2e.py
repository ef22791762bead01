"""The generated sbatch script, run for real on this machine with Slurm faked around it.

`scontrol` and `srun` are stubs on PATH; `srun` starts one task per simulated node, each with its own
SLURM_NODEID (the batch shell itself has SLURM_NODEID=0, as on node 0). `torchrun` is a stub that does
what torchrun does with these flags (one worker per GPU, RANK = node_rank * nproc + local rank), and
`nemo_automodel.cli.app` is a stand-in module that records what each worker received. A second test
uses the real torchrun and its c10d rendezvous instead of the stub.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from launch_support import make_problem, make_result

from automodel_dist.launch import write_launch_files

NODES, GPUS = 2, 2
HOSTS = ("node01", "node02")

SCONTROL = """#!/bin/bash
# scontrol show hostnames <nodelist>: one fake host per line
[ "$1 $2" = "show hostnames" ] || { echo "scontrol stub: unexpected $*" >&2; exit 2; }
for host in $FAKE_HOSTS; do echo "$host"; done
"""

SRUN = """#!{python}
# srun stub: one task per node, each with its own SLURM_NODEID/SLURM_PROCID, in --chdir.
import json, os, subprocess, sys
args = sys.argv[1:]
options = []
while args and args[0].startswith("--"):
    options.append(args.pop(0))
chdir = next((o.split("=", 1)[1] for o in options if o.startswith("--chdir=")), None)
with open(os.path.join(os.environ["RECORDS"], "srun.json"), "w") as f:
    json.dump({{"options": options, "command": args}}, f)
tasks = []
for node in range(int(os.environ["SLURM_NNODES"])):
    env = dict(os.environ, SLURM_NODEID=str(node), SLURM_PROCID=str(node), SLURM_LOCALID="0")
    tasks.append(subprocess.Popen(args, env=env, cwd=chdir))
sys.exit(max(task.wait() for task in tasks))
"""

TORCHRUN = """#!{python}
# torchrun stub: record the flags, then start --nproc_per_node workers as torchrun does
# (python -u -m <module> <args>, with RANK = node_rank * nproc + local rank).
import json, os, subprocess, sys
argv = sys.argv[1:]
flags = {{}}
while argv and argv[0].startswith("--"):
    key, value = argv.pop(0)[2:].split("=", 1)
    flags[key] = value
assert argv[0] == "-m", argv
module, args = argv[1], argv[2:]
node_rank, nproc, nnodes = int(flags["node_rank"]), int(flags["nproc_per_node"]), int(flags["nnodes"])
host, port = flags["rdzv_endpoint"].rsplit(":", 1)
record = {{"flags": flags, "module": module, "args": args, "cwd": os.getcwd(),
          "env": {{k: os.environ.get(k) for k in ("SLURM_NODEID", "MASTER_ADDR", "MASTER_PORT", "RECIPE",
                                                "PYTORCH_CUDA_ALLOC_CONF", "HF_HOME")}}}}
path = os.path.join(os.environ["RECORDS"], f"torchrun-{{os.environ['SLURM_NODEID']}}.json")
with open(path + ".part", "w") as f:
    json.dump(record, f)
os.replace(path + ".part", path)
workers = []
for local in range(nproc):
    env = dict(os.environ, RANK=str(node_rank * nproc + local), LOCAL_RANK=str(local),
               WORLD_SIZE=str(nnodes * nproc), LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK=str(node_rank),
               MASTER_ADDR=host, MASTER_PORT=port, TORCHELASTIC_RUN_ID="stub")
    workers.append(subprocess.Popen([sys.executable, "-u", "-m", module, *args], env=env))
sys.exit(max(w.wait() for w in workers))
"""

APP = """# Stand-in for nemo_automodel.cli.app: record what this worker received; optionally wait for USR1.
import json, os, signal, sys, time
records = os.environ["RECORDS"]
got = []


def save(name, value):  # write then rename, so a reader never sees half a file
    path = os.path.join(records, name)
    with open(path + ".part", "w") as f:
        json.dump(value, f)
    os.replace(path + ".part", path)



signal.signal(signal.SIGUSR1, lambda *_: got.append("SIGUSR1"))
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RUN_ID", "SLURM_NODEID")
record = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in keys}}
save(f"worker-{os.environ['RANK']}.json", record)
if os.environ.get("WAIT_FOR_USR1") == "1":
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    save(f"signals-{os.environ['RANK']}.json", got)
"""


def _sandbox(tmp_path: Path, *, stub_torchrun: bool) -> tuple[Path, dict[str, str]]:
    """Write the plan's launch files and the Slurm stubs; return (script, environment)."""
    problem = make_problem("llama-3.1-8b", "h100-80gb", NODES, GPUS)
    result = make_result(problem, launcher={"cache_dir": "/shared/cache"}, tp=2)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (script,) = write_launch_files(result, run_dir / "recipe.yaml", "slurm")
    bin_dir, records, pkgs = tmp_path / "bin", tmp_path / "records", tmp_path / "pkgs"
    for folder in (bin_dir, records, pkgs / "nemo_automodel" / "cli"):
        folder.mkdir(parents=True)
    stubs = {"scontrol": SCONTROL, "srun": SRUN.format(python=sys.executable)}
    if stub_torchrun:
        stubs["torchrun"] = TORCHRUN.format(python=sys.executable)
    for name, text in stubs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (pkgs / "nemo_automodel" / "__init__.py").write_text("")
    (pkgs / "nemo_automodel" / "cli" / "__init__.py").write_text("")
    (pkgs / "nemo_automodel" / "cli" / "app.py").write_text(APP)
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"
    env = {"PATH": path, "HOME": str(tmp_path), "RECORDS": str(records), "PYTHONPATH": str(pkgs),
           "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": str(NODES), "SLURM_NODEID": "0",
           "SLURM_GPUS_PER_NODE": str(GPUS), "SLURM_JOB_ID": "4242", "FAKE_HOSTS": " ".join(HOSTS),
           "HF_TOKEN": "hf_test"}
    return Path(script), env


def _records(env: dict[str, str], prefix: str) -> dict[str, dict]:
    folder = Path(env["RECORDS"])
    return {p.stem.split("-", 1)[1]: json.loads(p.read_text()) for p in sorted(folder.glob(f"{prefix}-*.json"))}


def _run_and_preempt(tmp_path: Path) -> tuple[Path, dict[str, str], int, str]:
    """Run the script with workers that wait; once all are up, send USR1 to the batch shell, as Slurm does."""
    script, env = _sandbox(tmp_path, stub_torchrun=True)
    env["WAIT_FOR_USR1"] = "1"
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    started = Path(env["RECORDS"]).glob
    while len(list(started("worker-*.json"))) < NODES * GPUS and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=90)
    return script, env, proc.returncode, stderr


def _check_ranks_world_and_rendezvous(script: Path, env: dict[str, str]) -> None:
    recipe = str(script.parent / "recipe.yaml")
    launchers = _records(env, "torchrun")
    assert sorted(launchers) == [str(n) for n in range(NODES)]
    for node, record in launchers.items():
        flags = record["flags"]
        assert flags["node_rank"] == node == record["env"]["SLURM_NODEID"]
        assert int(flags["nnodes"]) * int(flags["nproc_per_node"]) == NODES * GPUS
        assert flags["rdzv_backend"] == "c10d"
        assert flags["rdzv_endpoint"] == f"{HOSTS[0]}:13742"
        assert record["module"] == "nemo_automodel.cli.app" and record["args"] == [recipe]
        assert record["cwd"] == str(script.parent)
        assert record["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
        assert record["env"]["HF_HOME"] == "/shared/cache/huggingface"
    workers = _records(env, "worker")
    assert sorted(int(rank) for rank in workers) == list(range(NODES * GPUS))
    for rank, record in workers.items():
        assert record["env"]["WORLD_SIZE"] == str(NODES * GPUS)
        assert int(record["env"]["GROUP_RANK"]) == int(rank) // GPUS == int(record["env"]["SLURM_NODEID"])
        assert record["env"]["MASTER_ADDR"] == HOSTS[0]
        assert record["argv"] == [recipe]


def test_two_nodes_get_their_ranks_and_preemption_reaches_the_workers(tmp_path: Path) -> None:
    # One test, so that the only USR1 sent in a (parallel) test session is this one: the script's trap
    # signals every matching worker process of this user on the machine.
    script, env, returncode, stderr = _run_and_preempt(tmp_path)
    # torchrun (the stub has no USR1 handler) would have died and failed the job had it been signalled.
    assert returncode == 0, stderr
    _check_ranks_world_and_rendezvous(script, env)
    assert "USR1 from Slurm" in stderr
    assert _records(env, "signals") == {str(rank): ["SIGUSR1"] for rank in range(NODES * GPUS)}
    srun = json.loads((Path(env["RECORDS"]) / "srun.json").read_text())
    assert "--ntasks-per-node=1" in srun["options"] and "--kill-on-bad-exit=1" in srun["options"]
    assert srun["command"][:2] == ["bash", "-c"] and srun["command"][2].startswith("exec torchrun ")


def test_a_different_node_count_stops_before_launch(tmp_path: Path) -> None:
    script, env = _sandbox(tmp_path, stub_torchrun=True)
    env["SLURM_NNODES"] = "3"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "layout is for 2 nodes x 2 GPUs" in done.stderr and "hardware.nodes=3" in done.stderr
    assert not (tmp_path / "records" / "srun.json").exists()


def _ignore_usr1() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_real_torchrun_rendezvous_gives_every_worker_a_unique_rank(tmp_path: Path) -> None:
    script, env = _sandbox(tmp_path, stub_torchrun=False)
    env.update(FAKE_HOSTS="127.0.0.1 127.0.0.1", MASTER_PORT=str(_free_port()))
    # USR1 ignored from the start (inherited by every worker) so the preemption test running in parallel
    # cannot kill a worker of this run before it is up.
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=180, check=False,
                          preexec_fn=_ignore_usr1)
    assert done.returncode == 0, done.stderr[-3000:]
    workers = _records(env, "worker")
    assert sorted(int(rank) for rank in workers) == list(range(NODES * GPUS))
    groups: dict[str, list[int]] = {}
    for rank, record in workers.items():
        assert record["env"]["WORLD_SIZE"] == str(NODES * GPUS)
        assert record["env"]["LOCAL_WORLD_SIZE"] == str(GPUS)
        assert record["argv"] == [str(script.parent / "recipe.yaml")]
        groups.setdefault(record["env"]["GROUP_RANK"], []).append(int(rank))
    # c10d assigns node ranks itself; each node's workers hold a contiguous block of global ranks
    assert sorted(sorted(ranks) for ranks in groups.values()) == [[0, 1], [2, 3]]
