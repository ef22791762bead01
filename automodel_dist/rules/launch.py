"""Multi-node launch failures, as rules: what breaks when a recipe that works on one node meets Slurm.

Sources: AutoModel's `slurm.sub` and `docs/launcher/slurm.mdx` (one torchrun per node; USR1 forwarded
for preemption checkpoints), the Megatron-Bridge multi-node Slurm skill (`--ntasks-per-node=8` with
torchrun → EADDRINUSE; caches and NEMO_HOME on shared storage), and the MoE dispatcher notes (HybridEP
needs the real NVLink-domain size; MoK fuses dispatch and combine over one NVLink domain).

`check_launch` judges a recipe mapping and, when given, the sbatch script that launches it; the launch
writers run it on what they write. The multi-node timeout and EP-beyond-NVLink topology warnings are
recipe and layout rules (`dist-env-timeout`, `topo-ep-leaves-nvlink`), not repeated here.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from automodel_dist.dispatcher import ep_group_in_domain
from automodel_dist.findings import WARNING, Finding
from automodel_dist.layout import Layout
from automodel_dist.rules import registry as r
from automodel_dist.shell_syntax import SyntaxResult
from automodel_dist.textsafe import one_line
from automodel_dist.yamlio import lookup

# Caches every node must see (a node-local copy means one download per node, or files node 0 wrote
# that the others cannot read).
SHARED_CACHE_VARS = ("HF_HOME", "HF_DATASETS_CACHE", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                     "NEMO_HOME", "NEMO_HYBRIDEP_JIT_CACHE")
# Mount points that are per node on typical GPU clusters, and the container's own root home.
NODE_LOCAL_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/raid", "/local", "/scratch/local", "/mnt/local",
                       "/root", "$TMPDIR", "${TMPDIR}")

HYBRIDEP_DOMAIN_VAR = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"

_SBATCH_DIRECTIVE = re.compile(r"^#SBATCH\s+(.*)$")
_SRUN = re.compile(r"\bsrun\b(.*?)(?=\s(?:bash|sh|torchrun|python3?|env)\b|$)")
_EXPORT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S*)")
_DEFAULTED = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:?-(.*)\}$")
_VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
# AutoModel's CLI, which starts torchrun itself on the node it runs on (reference/automodel.md §8.1).
_AUTOMODEL_CLI = re.compile(r"(?:^|[\s;&|('\"])automodel(?:\s|$)|nemo_automodel\.cli\.app", re.M)


def is_node_local(path: str) -> bool:
    """True for a path on storage other nodes cannot see (see NODE_LOCAL_PREFIXES)."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in NODE_LOCAL_PREFIXES)


def signal_entries(preemption_signal: object) -> list[object]:
    """The entries of `step_scheduler.preemption_signal`: a list of signals, or one."""
    return list(preemption_signal) if isinstance(preemption_signal, (list, tuple)) else [preemption_signal]


def signal_name(text: str) -> str:
    """A signal name as AutoModel's resolve_signal reads it: any case, SIG optional ('sigusr1' -> 'USR1')."""
    return text.strip().upper().removeprefix("SIG")


def names_sigusr1(value: object) -> bool:
    """Does one `preemption_signal` entry resolve to SIGUSR1 the way AutoModel's resolve_signal does?"""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == signal.SIGUSR1.value
    if isinstance(value, str):
        return signal_name(value) == "USR1"
    return False


def handles_sigusr1(preemption_signal: object) -> bool:
    return any(names_sigusr1(e) for e in signal_entries(preemption_signal))


def ep_dispatcher_findings(layout: Layout, *, nvlink_domain: int,
                           env: Mapping[str, str] | None = None) -> list[Finding]:
    """Dispatchers that need to know, or stay inside, the NVLink domain the EP groups span.

    `env` is the launch script's environment (None when there is no script to judge).
    """
    if layout.ep <= 1 or layout.strategy != "fsdp2" or ep_group_in_domain(layout.ep, nvlink_domain, layout.world_size):
        return []
    if layout.dispatcher == "mok":
        return [r.EP_NVLINK.finding(
            f"dispatcher 'mok' with ep_size={layout.ep}: expert-parallel groups of {layout.ep} consecutive ranks "
            f"leave the {nvlink_domain}-GPU NVLink domain, and MoK fuses dispatch and combine over one domain",
            hint=f"keep ep_size a divisor of the NVLink domain ({nvlink_domain}), or use dispatcher: hybridep "
                 "for expert parallelism across domains")]
    if layout.dispatcher == "hybridep" and env is not None:
        value = env.get(HYBRIDEP_DOMAIN_VAR)
        if value != str(nvlink_domain):
            told = "is not set" if value is None else f"is {value}"
            return [r.EP_NVLINK.finding(
                f"dispatcher 'hybridep' with EP groups spanning NVLink domains, but {HYBRIDEP_DOMAIN_VAR} {told} "
                f"in the launch script; HybridEP needs the real domain size ({nvlink_domain}): a mismatch costs "
                "speed and sometimes correctness",
                hint=f"export {HYBRIDEP_DOMAIN_VAR}={nvlink_domain} in the launch script", severity=WARNING)]
    return []


def sbatch_env(sbatch_text: str) -> dict[str, str]:
    """Variables the script sets (`export A=b` / `A=b`); `${A:-default}` reads as its default, `$B` as B's value."""
    return {name: value for name, (value, _) in assignments(sbatch_text).items()}


def _exports(sbatch_text: str) -> Iterator[tuple[str, str, str, int, bool]]:
    """Each assignment in order: (name, value as written, value read, 1-based line, whether it is an `export` at
    the script's top level, unindented: set once for the whole job, not in a branch, loop or function); the value
    read takes `${A:-default}` as its default and `$B` as B's value so far."""
    values: dict[str, str] = {}
    for number, line in enumerate(sbatch_text.splitlines(), start=1):
        match = _EXPORT.match(line)
        if match:
            written = match.group(2)
            value = written.strip("\"'")
            defaulted = _DEFAULTED.match(value)
            value = defaulted.group(1).strip("\"'") if defaulted else value
            values[match.group(1)] = _VAR_REF.sub(lambda m: values.get(m.group(1) or m.group(2), m.group(0)), value)
            yield match.group(1), written, values[match.group(1)], number, line.startswith("export ")


def assignments(sbatch_text: str) -> dict[str, tuple[str, int]]:
    """sbatch_env's values, each with the 1-based line of its last assignment."""
    return {name: (value, line) for name, _, value, line, _ in _exports(sbatch_text)}


def reassignment_findings(sbatch_text: str) -> list[tuple[Finding, int]]:
    """A variable the script exports again, at its top level, to another value that does not build on the first
    (`$NAME` in it) or compute (`$(`): the later silently wins (an intent's launcher.env over what the plan set),
    each with the later line. Assignments in branches, loops and functions (indented), per-command prefixes and
    plain shell variables are the script's own logic, not judged."""
    found: list[tuple[Finding, int]] = []
    earlier: dict[str, tuple[str, int]] = {}
    for name, written, value, line, top_export in _exports(sbatch_text):
        if not top_export or "$(" in written or "`" in written:
            continue
        before = earlier.get(name)
        if before and before[0] != value and not re.search(rf"\$\{{?{name}\b", written):
            found.append((env_reassigned(name, before[0], f"line {before[1]}", value, f"line {line}"), line))
        earlier[name] = (value, line)
    return found


def env_reassigned(name: str, first: str, first_at: str, later: str, later_at: str, path: str = r.SCRIPT) -> Finding:
    """`name` set to `first` (at `first_at`), then to `later`, which wins."""
    return r.ENV_REASSIGNED.finding(
        f"{name} is set to {one_line(first)!r} ({first_at}) and then to {one_line(later)!r} ({later_at}): the later "
        "value wins", path=path,
        hint=f"keep one value of {name} (in a script automodel-dist wrote, drop it from the intent's launcher.env to "
             "keep the plan's)")


def code_lines(sbatch_text: str) -> str:
    """The script without its comments (and without #SBATCH directives)."""
    return "\n".join(line.split("#", 1)[0] for line in sbatch_text.splitlines())


def launches_torchrun(code: str) -> bool:
    """`code` is the script without comments (`code_lines`): a commented-out torchrun launches nothing."""
    return "torchrun" in code or "torch.distributed.run" in code or "torch.distributed.launch" in code


def _sbatch_refusal(text: str) -> tuple[str, int] | None:
    """(why, 1-based line) when sbatch itself refuses the script (sbatch.c `_get_script_buffer`), else None."""
    if not text:
        return 'the script is empty (sbatch: "Batch script is empty!")', 1
    if not text.strip(" \t\n\v\f\r"):  # C's isspace, which sbatch uses
        return 'the script holds only whitespace (sbatch: "Batch script contains only whitespace!")', 1
    if not text.startswith("#!"):
        return ("the first line does not start with #! and an interpreter (sbatch: \"This does not look like a "
                "batch script\")"), 1
    if "\0" in text:
        return "the script holds a NUL character, which the Slurm controller does not allow", _line_of(text, "\0")
    if "\r\n" in text:
        return ("the script has DOS line breaks (\\r\\n), which sbatch refuses (and bash would read as part of "
                "each command)"), _line_of(text, "\r\n")
    return None


def _line_of(text: str, needle: str) -> int:
    return text.count("\n", 0, text.index(needle)) + 1


def _first_line(code: str, word: str) -> int:
    """The 1-based line where `word` first appears as a command word in `code`, else 1."""
    for number, line in enumerate(code.splitlines(), start=1):
        if re.search(rf"(?:^|[\s;&|(]){word}(?:\s|$)", line):
            return number
    return 1


def syntax_findings(syntax: SyntaxResult | None) -> list[tuple[Finding, int]]:
    """The launch script's `bash -n` verdict (`shell_syntax.script_syntax`; None: not judged) as findings, each
    with its script line: a syntax error, or a note that the check could not be made."""
    if syntax is None or syntax.ok:
        return []
    if not syntax.checked:
        return [(r.SKIPPED.finding(f"the launch script's shell syntax was not checked: {syntax.reason}",
                                   path=r.SCRIPT, hint="run `bash -n` on the script yourself"), 1)]
    return [(r.SBATCH_SYNTAX.finding(
        f"the launch script is not valid shell (bash -n): {syntax.message}; the job would fail as it starts, after "
        "waiting in the queue", hint="fix the script at that line (an unclosed quote, if/fi, do/done or brace?)"),
        syntax.line or 1)]


def _start_up_findings(sbatch_text: str, code: str, multi_node: bool,
                       syntax: SyntaxResult | None) -> tuple[list[Finding], bool]:
    """What keeps the job from starting at all: sbatch refusing the script, a shell syntax error (`syntax`,
    what `shell_syntax.script_syntax` found; None when not judged), no torchrun.

    Returns the findings (each with its script line) and whether the other script rules can judge the script
    (not when it is empty).
    """
    found: list[tuple[Finding, int]] = []
    refusal = _sbatch_refusal(sbatch_text)
    if refusal:
        found.append((r.SBATCH_REJECTED.finding(
            f"sbatch refuses this launch script: {refusal[0]}",
            hint="start the script with #!/bin/bash, save it with Unix line breaks, and give it the srun/torchrun "
                 "command"), refusal[1]))
        if refusal[1] == 1 and not sbatch_text.strip(" \t\n\v\f\r"):
            return [replace(f, line=line, col=1) for f, line in found], False
    found += syntax_findings(syntax)
    # A script that maps Slurm's task ids to RANK itself (srun, one task per GPU) needs no torchrun.
    if not launches_torchrun(code) and "SLURM_PROCID" not in code:
        runs_cli = _AUTOMODEL_CLI.search(code) is not None
        if multi_node or not runs_cli:
            if runs_cli:
                message = ("the launch script runs AutoModel's CLI without torchrun on several nodes: the CLI "
                           "starts its own one-node torchrun on each node, so every node trains alone in a world of "
                           "its own and the nodes never rendezvous")
            else:
                message = ("the launch script never starts torchrun (or python -m torch.distributed.run): no "
                           "AutoModel training worker gets the RANK/WORLD_SIZE/LOCAL_RANK it needs, so the job "
                           "trains nothing")
            found.append((r.NO_TORCHRUN.finding(
                message, hint="run one torchrun per node under srun: srun --ntasks-per-node=1 bash -c 'torchrun "
                              "--nnodes=$SLURM_NNODES --nproc_per_node=<GPUs> --node_rank=$SLURM_NODEID "
                              "--rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT -m "
                              "nemo_automodel.cli.app <recipe>'"), _first_line(code, "srun")))
    return [replace(f, line=line, col=1) for f, line in found], True


def _options(sbatch_text: str) -> list[tuple[str, int]]:
    """(option text, 1-based line) of every #SBATCH directive and every srun's own options (the text between
    `srun` and the command it starts, so a `head -n 1` elsewhere is not read as `-n`)."""
    found = []
    for number, line in enumerate(sbatch_text.splitlines(), start=1):
        directive = _SBATCH_DIRECTIVE.match(line.strip())
        if directive:
            found.append((directive.group(1), number))
            continue
        code = line.split("#", 1)[0]
        match = _SRUN.search(code)
        if match:
            found.append((match.group(1), number))
    return found


def _option_values(text: str, long: str, short: str | None = None) -> list[int]:
    """Integer values of `--long=N`, `--long N` (and `-sN`, `-s N` for a short name) in one line of options;
    a range's lower end."""
    flags = rf"--{long}[= ]\s*" + (rf"|(?<![\w-])-{short}\s*" if short else "")
    return [int(v) for v in re.findall(rf"(?:{flags})(\d+)", text)]


def tasks_per_node(sbatch_text: str) -> tuple[int, int] | None:
    """(tasks per node, 1-based line) at its largest: `--ntasks-per-node`, or `--ntasks` over `--nodes`
    (#SBATCH lines and srun flags; srun inherits the allocation's node count)."""
    best: tuple[int, int] | None = None
    options = _options(sbatch_text)
    nodes = max([1, *(n for text, _ in options for n in _option_values(text, "nodes", "N"))])
    for text, number in options:
        per_node = _option_values(text, "ntasks-per-node") + [
            -(-n // nodes) for n in _option_values(text, "ntasks", "n")]
        for value in per_node:
            if best is None or value > best[0]:
                best = (value, number)
    return best


def requested_nodes(sbatch_text: str) -> tuple[int, int] | None:
    """(nodes, 1-based line) the script's `#SBATCH --nodes` / `-N` asks for."""
    for number, line in enumerate(sbatch_text.splitlines(), start=1):
        directive = _SBATCH_DIRECTIVE.match(line.strip())
        values = _option_values(directive.group(1), "nodes", "N") if directive else []
        if values:
            return values[0], number
    return None


def _sends_usr1(sbatch_text: str) -> bool:
    """Does an `#SBATCH --signal=[R|B:]USR1[@secs]` directive ask Slurm for SIGUSR1 before the limit?"""
    for line in sbatch_text.splitlines():
        directive = _SBATCH_DIRECTIVE.match(line.strip())
        if directive and re.search(r"--signal[= ](?:[A-Z]+:)?(?:(?:SIG)?USR1|10)\b", directive.group(1)):
            return True
    return False


def check_sbatch(sbatch_text: str, recipe: Mapping[str, Any], *, multi_node: bool,
                 sbatch_file: str | None = None, sbatch_syntax: SyntaxResult | None = None,
                 nodes: int | None = None) -> list[Finding]:
    """Rules on the launch script itself (found at the script's line, in `sbatch_file` when named), and on
    the recipe settings the script relies on. `sbatch_syntax` is the script's `bash -n` verdict
    (`shell_syntax.script_syntax`), given by the caller that read the script; None leaves syntax unjudged.
    `nodes` is the node count the recipe is judged for."""
    def at_line(finding: Finding, line: int) -> Finding:
        return replace(finding, line=line, col=1, file=sbatch_file)

    code = code_lines(sbatch_text)
    start_up, judged = _start_up_findings(sbatch_text, code, multi_node, sbatch_syntax)
    findings = [at_line(f, f.line or 1) for f in start_up]
    if not judged:
        return findings
    findings += [at_line(f, line) for f, line in reassignment_findings(sbatch_text)]
    if nodes is not None:
        asked = requested_nodes(sbatch_text)
        if asked is not None and asked[0] != nodes:
            findings.append(at_line(r.SCRIPT_NODES.finding(
                f"the script asks Slurm for {asked[0]} nodes, but the recipe is judged for {nodes} nodes: "
                f"torchrun would start {asked[0]} x <GPUs per node> ranks, not the world validated here",
                hint=f"make #SBATCH --nodes={nodes} (or validate with --nodes {asked[0]})"), asked[1]))
    tasks = tasks_per_node(sbatch_text)
    if tasks and tasks[0] > 1 and launches_torchrun(code):
        findings.append(at_line(r.NTASKS_PER_NODE.finding(
            f"--ntasks-per-node={tasks[0]} with torchrun starts {tasks[0]} torchrun launchers per node, each "
            "spawning its own workers on the same rendezvous port: EADDRINUSE, or a world size "
            f"{tasks[0]}x too large",
            hint="use --ntasks-per-node=1 (one torchrun per node, --nproc_per_node=<GPUs per node>)"), tasks[1]))
    if "nemo_automodel.cli.app" in code:
        for section in ("skypilot", "nemo_run"):
            if recipe.get(section):
                findings.append(r.LAUNCHER_SECTION.finding(
                    f"the recipe has a {section}: section, so nemo_automodel.cli.app in every worker the script "
                    f"starts submits a {section} job instead of training (AutoModel checks it before torchrun)",
                    hint=f"remove the {section}: section from the recipe this script launches", path=section))
    preemption_signal = lookup(recipe, "step_scheduler.preemption_signal")[1] or "SIGTERM"
    if _sends_usr1(sbatch_text) and not handles_sigusr1(preemption_signal):
        findings.append(r.PREEMPTION_SIGNAL.finding(
            "the launch script has Slurm send SIGUSR1 before the time limit, but the recipe's "
            "step_scheduler.preemption_signal does not handle SIGUSR1 (default: SIGTERM only): the signal "
            "kills the workers instead of triggering a checkpoint",
            hint="set step_scheduler.preemption_signal: [SIGUSR1, SIGTERM]"))
    if multi_node:
        env = assignments(sbatch_text)
        recipe_path, line = env.get("RECIPE", ("", 0))
        if is_node_local(recipe_path):
            findings.append(at_line(r.NODE_LOCAL_CACHE.finding(
                f"the recipe {recipe_path} is on node-local storage: the other nodes cannot read it",
                hint="write the recipe (compile -o) to a folder every node mounts", path=r.SCRIPT, severity=WARNING),
                line))
        for name in SHARED_CACHE_VARS:
            value, line = env.get(name, ("", 0))
            if is_node_local(value):
                findings.append(at_line(r.NODE_LOCAL_CACHE.finding(
                    f"{name}={value} is on node-local storage: every node downloads or compiles its own copy, "
                    "and files node 0 prepares are invisible to the others",
                    hint=f"point {name} at shared storage (launcher.cache_dir in the intent)", path=r.SCRIPT,
                    severity=WARNING), line))
    return findings


def check_launch(recipe: Mapping[str, Any], *, world_size: int, gpus_per_node: int,
                 sbatch_text: str | None = None, sbatch_file: str | None = None, layout: Layout | None = None,
                 nvlink_domain: int | None = None, sbatch_syntax: SyntaxResult | None = None) -> list[Finding]:
    """Every launch rule on a recipe (and its sbatch script, when given; `sbatch_file` names it in findings).

    `layout` is the recipe's parsed Layout, needed for the dispatcher rule; `nvlink_domain` is the
    cluster's (ClusterSpec.nvlink_domain), default `gpus_per_node`; `sbatch_syntax` the script's `bash -n`
    verdict (see check_sbatch).
    """
    findings: list[Finding] = []
    multi_node = world_size > gpus_per_node
    if multi_node:
        ckpt_dir = lookup(recipe, "checkpoint.checkpoint_dir")[1]
        enabled = lookup(recipe, "checkpoint.enabled")[1] is not False
        if enabled and isinstance(ckpt_dir, str) and is_node_local(ckpt_dir):
            findings.append(r.NODE_LOCAL_CACHE.finding(
                f"checkpoint.checkpoint_dir {ckpt_dir} is on node-local storage: each node writes only its own "
                "shards there, so the checkpoint can be neither consolidated nor restored",
                hint="put checkpoint_dir on storage every node mounts (e.g. a Lustre or NFS path)"))
    if layout is not None:
        env = sbatch_env(sbatch_text) if sbatch_text is not None else None
        findings += ep_dispatcher_findings(layout, nvlink_domain=nvlink_domain or gpus_per_node, env=env)
    if sbatch_text is not None:
        findings += check_sbatch(sbatch_text, recipe, multi_node=multi_node, sbatch_file=sbatch_file,
                                 sbatch_syntax=sbatch_syntax, nodes=-(-world_size // gpus_per_node))
    return findings
