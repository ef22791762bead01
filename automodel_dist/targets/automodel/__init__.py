"""The NeMo AutoModel recipe target: `parse.parse_recipe` reads a recipe, `emit` writes one."""

from automodel_dist.targets.automodel.parse import parse_recipe

__all__ = ["parse_recipe"]
