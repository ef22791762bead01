"""Differential test: our step_scheduler verdicts equal AutoModel 0.7.0's own StepScheduler.

`StepScheduler.__init__` checks batch-size positivity, `global_batch_size % (local_batch_size * dp)` and
the step counters before it touches the data. We build it with a sized stand-in dataloader and the dp
that the recipe's mesh gives, and compare with the R39 findings `validate` reports for the same recipe.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.rules import registry as r
from automodel_dist.validate import validate_recipe

STEP_RULES = frozenset({r.GBS_DIVISIBLE.id, r.STEP_SCHEDULER_POSITIVE.id})
WORLD = 8
counts = st.sampled_from([*[None] * 12, 1, 2, 5, 0, -1])  # mostly absent: one bad counter at a time


def automodel_step_error(fields: dict[str, Any], dp: int) -> str | None:
    from nemo_automodel.components.training.step_scheduler import StepScheduler

    kwargs = {"global_batch_size": 32, "local_batch_size": 1, **{k: v for k, v in fields.items() if v is not None}}
    try:
        StepScheduler(dp_size=dp, dataloader=list(range(64)), preemption_signal=None, **kwargs)
    except ValueError as exc:
        return str(exc)
    return None


@settings(max_examples=200, deadline=None, derandomize=True)
@given(tp=st.sampled_from([1, 2, 4]), fields=st.fixed_dictionaries({
    "global_batch_size": st.sampled_from([-8, 0, 6, 8, 16, 24, 32, 64, 64, 128]),
    "local_batch_size": st.sampled_from([-1, 0, 1, 1, 2, 2, 3, 4, 4]),
    "max_steps": counts, "num_epochs": counts, "ckpt_every_steps": counts, "val_every_steps": counts,
    "gc_every_steps": counts, "log_remote_every_steps": counts, "loss_average_window_steps": counts,
    "start_step": counts, "start_epoch": counts}))
def test_step_scheduler_verdicts_match_automodel(tp: int, fields: dict[str, Any]) -> None:
    expected = automodel_step_error(fields, dp=WORLD // tp)
    steps = {k: v for k, v in fields.items() if v is not None}
    recipe = {"recipe": "TrainFinetuneRecipeForNextTokenPrediction", "distributed": {"tp_size": tp},
              "step_scheduler": steps}
    ours = [f for f in validate_recipe(recipe, world_size=WORLD).errors if f.rule in STEP_RULES]
    context = f"tp={tp} {steps}: AutoModel {expected!r}; we say {[f.automodel_message for f in ours]}"
    if expected is None:
        assert ours == [], context
    elif expected.startswith("num_epochs") and "num_epochs" not in steps:
        # A non-positive max_steps without num_epochs: AutoModel derives num_epochs = ceil(max_steps / epoch
        # length) first and complains about that; the epoch length depends on the dataset, so we name the
        # key the user wrote.
        assert "step_scheduler.max_steps" in {f.path for f in ours}, context
    else:
        assert expected in {f.automodel_message for f in ours}, context
