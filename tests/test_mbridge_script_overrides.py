"""The OVERRIDES array of a Megatron-Bridge launch script, read as bash reads it (script_overrides.script_items)."""

from __future__ import annotations

import pytest

from automodel_dist.targets.megatron_bridge.script_overrides import Word, check_script_overrides, script_items

HEAD = "#!/bin/bash\nset -euo pipefail\n"


@pytest.mark.parametrize(("body", "items"), [
    ("OVERRIDES=(\n    a.b=1\n    'c.d=[x, y]'\n)\n", [(4, "a.b=1", True), (5, "c.d=[x, y]", True)]),
    ("OVERRIDES=(a.b=1 c.d=2)\n", [(3, "a.b=1", True), (3, "c.d=2", True)]),  # one line
    ("declare -a OVERRIDES=(\n  a.b=1 )\n", [(4, "a.b=1", True)]),  # declare, `)` on the item's line
    ("OVERRIDES=(\n  a.b=1 \\\n  c.d=2\n)\n", [(4, "a.b=1", True), (5, "c.d=2", True)]),  # continuation
    ("OVERRIDES=(\n  a.name=run#3  # a comment\n  # a.b=9\n)\n", [(4, "a.name=run#3", True)]),  # `#` mid-word
    ('OVERRIDES=(\n  "a.ckpt=\\${oc.env:CKPT}"\n  \'b.ckpt=${oc.env:CKPT}\'\n)\n',
     [(4, "a.ckpt=${oc.env:CKPT}", True), (5, "b.ckpt=${oc.env:CKPT}", True)]),  # escaped and single-quoted `$`
    ("GBS=64\nOVERRIDES=(\n  train.gbs=$GBS\n  \"x.y=$(date)\"\n  z.w=`id`\n)\n",
     [(5, "train.gbs=$GBS", False), (6, "x.y=$(date)", False), (7, "z.w=`id`", False)]),  # known only when run
    ("OVERRIDES=(a.b=1)\nOVERRIDES+=(c.d=2)\n", [(3, "a.b=1", True), (4, "c.d=2", True)]),  # an append
    ("OVERRIDES=(a.b=1)\nOVERRIDES=(c.d=2)\n", [(4, "c.d=2", True)]),  # set again
    ('OVERRIDES=(a.b=1)\nOVERRIDES=("${OVERRIDES[@]}" c.d=2)\n', [(3, "a.b=1", True), (4, "c.d=2", True)]),
    ("OVERRIDES=($'a.b=1' $'c.d=x\\ty')\n", [(3, "a.b=1", True), (3, "c.d=x\ty", True)]),  # ANSI-C quotes
    ("OVERRIDES=(a.b=1)\n: <<'OFF'\nOVERRIDES+=(c.d=2)\nOFF\n", [(3, "a.b=1", True)]),  # a here-document
])
def test_the_array_is_read_as_bash_reads_it(body: str, items: list[tuple[int, str, bool]]) -> None:
    assert script_items(HEAD + body) == [Word(*item) for item in items]


def test_a_script_without_the_array_is_not_judged() -> None:
    body = HEAD + "srun python run.py a.b=1\n"
    assert script_items(body) is None and check_script_overrides(body, {"a.b": 2}, None, "launch.sbatch") == []


@pytest.mark.parametrize(("body", "why"), [
    ("if true; then\n  OVERRIDES=(a.b=1)\nfi\n", "inside a block"),            # set in a branch
    ("OVERRIDES=(a.b=1)\nif x; then\n  OVERRIDES+=(c.d=2)\nfi\n", "inside a block"),   # extended in a branch
    ("OVERRIDES=(a.b=1)\nOVERRIDES[1]=c.d=2\n", "one element"),                # an element assignment
    ("OVERRIDES=(\n  a.b=1\n); OVERRIDES+=(c.d=2)\n", "changes it again"),      # a second statement
])
def test_a_list_the_reader_cannot_follow_is_noted_not_judged(body: str, why: str) -> None:
    [note] = check_script_overrides(HEAD + body, {"a.b": 2}, None, "launch.sbatch")
    assert note.severity == "note" and why in note.message and note.file == "launch.sbatch"


def test_an_item_whose_value_only_the_run_knows_is_not_compared() -> None:
    text = HEAD + "GBS=64\nOVERRIDES=(\n  train.global_batch_size=$GBS\n  model.tensor_model_parallel_size=2\n)\n"
    found = check_script_overrides(text, {"train.global_batch_size": 64, "model.tensor_model_parallel_size": 4},
                                   None, "launch.sbatch")
    assert [(f.rule, f.path, f.line) for f in found] == [
        ("mb-slurm-overrides-differ", "model.tensor_model_parallel_size", 6)]
