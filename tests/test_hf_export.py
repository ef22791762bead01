"""Every catalog architecture written out as a config.json reads back as the same ModelSpec."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from automodel_dist.catalog.hf_config import model_from_hf_config
from automodel_dist.catalog.hf_export import hf_config_dict
from automodel_dist.catalog.models import list_models
from automodel_dist.errors import InputError

IDENTITY = ("name", "family", "source")  # what a config.json does not carry (Kimi-K2's model_type is DeepSeek-V3's)


@pytest.mark.parametrize("preset", list_models(), ids=lambda p: p.id)
def test_exported_config_reads_back_as_the_preset(preset) -> None:
    spec = preset.spec
    back = model_from_hf_config(hf_config_dict(spec), spec.name)
    strip = lambda s: {k: v for k, v in asdict(s).items() if k not in IDENTITY}  # noqa: E731
    assert strip(back) == strip(spec)


def test_a_family_without_a_config_is_input_error() -> None:
    from automodel_dist.catalog.models import resolve_model

    custom = resolve_model({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                            "vocab_size": 1000})
    with pytest.raises(InputError, match="no Hugging Face config"):
        hf_config_dict(custom)
