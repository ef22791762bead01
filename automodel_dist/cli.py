"""`automodel-dist`: a thin shell over the public API.

Exit codes: 0 success, 1 a config that fails (validation errors, nothing fits), 2 bad input.
A user's mistake is always a message, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from automodel_dist.errors import AutomodelDistError, InputError


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`, else a usage error naming `what` was expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "a non-negative integer")


TARGETS = ("automodel", "megatron-bridge")


def _write_outputs(files: dict[Path, str]) -> list[str]:
    """Write each output file (its folder made first); an unwritable path is bad input naming it."""
    written = []
    for path, text in files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write the output: {exc.strerror or exc}", where=exc.filename or str(path),
                             hint="pass -o the path of a file in a folder you can write to") from None
        written.append(str(path))
    return written


def _compile_megatron(args: argparse.Namespace) -> int:
    from automodel_dist.targets.megatron_bridge.compile import compile_megatron

    if args.launcher == "skypilot":
        raise InputError("--target megatron-bridge launches with slurm only", hint="use --launcher slurm")
    if args.launcher and (args.format != "yaml" or not args.output):
        raise InputError("--launcher writes the override YAML and launch.sbatch beside it: it needs -o and the "
                         "yaml format", hint="add -o run/overrides.yaml and drop --format")
    result = compile_megatron(args.intent, args.overrides)
    if args.format == "json":
        text = json.dumps(result.to_json(), indent=2) + "\n"
    elif args.format == "hydra":
        text = "\n".join(result.hydra) + "\n"
    else:
        text = result.yaml
    if not args.output:
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    files = {out: text}
    if args.launcher:
        from automodel_dist.targets.megatron_bridge.slurm import launch_script

        files[out.parent / "launch.sbatch"] = launch_script(result, out.name)
    print("wrote " + ", ".join(_write_outputs(files)), file=sys.stderr)
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    from automodel_dist.compiler import compile_intent

    if args.target == "megatron-bridge":
        return _compile_megatron(args)
    if args.format == "hydra":
        raise InputError("--format hydra is the megatron-bridge target's", hint="add --target megatron-bridge")

    if args.launcher and args.format == "json":
        raise InputError("--launcher rewrites the recipe as YAML; it cannot be combined with --format json",
                         hint="drop --format json")
    if args.launcher and not args.output:
        raise InputError("--launcher needs -o/--output: the launch files are written beside the recipe",
                         hint="add -o run/recipe.yaml")
    kwargs = {}
    if args.output:  # the recipe's `$schema` line points at the shipped schema, relative to where it is written
        from automodel_dist.resources import RECIPE_SCHEMA, SCHEMAS_DIR

        schema = SCHEMAS_DIR / RECIPE_SCHEMA
        kwargs["schema_ref"] = Path(os.path.relpath(schema, Path(args.output).resolve().parent)).as_posix()
    result = compile_intent(args.intent, args.overrides, **kwargs)
    text = json.dumps(result.to_json(), indent=2) + "\n" if args.format == "json" else result.yaml
    if not args.output:
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if args.launcher:  # it writes the recipe itself, with the launch settings, once the launch rules pass
            from automodel_dist.launch import write_launch_files

            written = [str(out), *write_launch_files(result, out, args.launcher)]
        else:
            out.write_text(text, encoding="utf-8")
            written = [str(out)]
    except OSError as exc:  # -o names a folder, or a place this user cannot write: bad input, not a traceback
        raise InputError(f"cannot write the output: {exc.strerror or exc}", where=exc.filename or str(out),
                         hint="pass -o the path of a file in a folder you can write to") from None
    print("wrote " + ", ".join(written), file=sys.stderr)
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from automodel_dist.compiler import compile_intent
    from automodel_dist.explain import render_explain

    if args.target == "megatron-bridge":
        from automodel_dist.targets.megatron_bridge.compile import compile_megatron, explain_settings

        result = compile_megatron(args.intent, args.overrides)
        text = render_explain(result, top=args.top, fmt=args.format)
        sys.stdout.write(text if args.format == "json" else text + "\n" + explain_settings(result))
        return 0
    result = compile_intent(args.intent, args.overrides)
    sys.stdout.write(render_explain(result, top=args.top, fmt=args.format))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from automodel_dist.report import render_report
    from automodel_dist.validate import validate_recipe

    if args.target == "megatron-bridge":
        from automodel_dist.targets.megatron_bridge.compile import validate_overrides

        if not args.recipe_function:
            raise InputError("--target megatron-bridge needs --recipe, the recipe function the overrides apply to",
                             hint="e.g. --recipe deepseek_v3_pretrain_config")
        report = validate_overrides(args.recipe, recipe=args.recipe_function,
                                    world_size=args.nodes * args.gpus_per_node, gpus_per_node=args.gpus_per_node,
                                    model=args.model, gpu=args.gpu, sbatch=Path(args.sbatch) if args.sbatch else None)
        sys.stdout.write(render_report(report, fmt=args.format))
        return 0 if report.ok else 1
    if args.recipe_function:
        raise InputError("--recipe names a Megatron-Bridge recipe function", hint="add --target megatron-bridge")
    report = validate_recipe(args.recipe, world_size=args.nodes * args.gpus_per_node,
                             gpus_per_node=args.gpus_per_node, model=args.model, gpu=args.gpu,
                             sbatch=Path(args.sbatch) if args.sbatch else None)
    sys.stdout.write(render_report(report, fmt=args.format))
    return 0 if report.ok else 1


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from automodel_dist.verify.cli import run_dry_run

    return run_dry_run(args)


def _cmd_schema(args: argparse.Namespace) -> int:
    from automodel_dist.resources import INTENT_SCHEMA, RECIPE_SCHEMA, SCHEMAS_DIR

    name = {"intent": INTENT_SCHEMA, "recipe": RECIPE_SCHEMA}[args.which]
    sys.stdout.write((SCHEMAS_DIR / name).read_text(encoding="utf-8"))
    return 0


def _cmd_presets(args: argparse.Namespace) -> int:
    from automodel_dist.catalog.listing import render_presets

    sys.stdout.write(render_presets(args.which, fmt=args.format))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="automodel-dist",
        description="Compile a training intent into a NeMo AutoModel recipe with the right distributed layout; "
        "validate recipes and dry-run their device meshes on CPU.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("compile", help="compile an intent into an AutoModel recipe")
    p.add_argument("intent", help="intent YAML file")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. training.seq_length=8192")
    p.add_argument("-o", "--output", help="write the recipe here instead of stdout")
    p.add_argument("--format", choices=("yaml", "json", "hydra"), default="yaml",
                   help="hydra: the megatron-bridge override set as key=value lines")
    p.add_argument("--launcher", choices=("slurm", "skypilot"),
                   help="also write what launches it (slurm: launch.sbatch beside the recipe)")
    p.add_argument("--target", choices=TARGETS, default="automodel",
                   help="automodel: an AutoModel recipe; megatron-bridge: overrides for a recipe function")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("explain", help="show the chosen layout, the runners-up and what was pruned")
    p.add_argument("intent", help="intent YAML file")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. training.seq_length=8192")
    p.add_argument("--top", type=_positive_int, default=10, help="how many runner-up layouts to show")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--target", choices=TARGETS, default="automodel")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("validate", help="check an existing AutoModel recipe before launching it")
    p.add_argument("recipe", help="AutoModel recipe YAML (or Megatron-Bridge overrides with --target)")
    p.add_argument("--target", choices=TARGETS, default="automodel")
    p.add_argument("--recipe", dest="recipe_function", metavar="FUNCTION",
                   help="megatron-bridge: the recipe function, e.g. deepseek_v3_pretrain_config")
    p.add_argument("--nodes", type=_positive_int, default=1)
    p.add_argument("--gpus-per-node", type=_positive_int, default=8)
    p.add_argument("--model", help="model preset or Hugging Face id (default: model.pretrained_model_name_or_path)")
    p.add_argument("--gpu", help="GPU preset, e.g. h100-80gb (enables memory checks)")
    p.add_argument("--sbatch", metavar="PATH", help="the Slurm script that launches the recipe (judged with it)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("dry-run", help="build AutoModel's device meshes on CPU (needs the dryrun extra)")
    p.add_argument("source", help="AutoModel recipe YAML, or an intent YAML (compiled first)")
    p.add_argument("--nodes", type=_positive_int, help="nodes (a recipe needs it; an intent carries its own)")
    p.add_argument("--gpus-per-node", type=_positive_int, help="GPUs per node (default 8 for a recipe)")
    p.add_argument("--rank", type=_non_negative_int, default=0, help="show this rank's coordinates and groups")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_cmd_dry_run)

    p = sub.add_parser("schema", help="print a JSON Schema")
    p.add_argument("which", choices=("intent", "recipe"))
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser("presets", help="list model or hardware presets")
    p.add_argument("which", choices=("models", "hardware"))
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_cmd_presets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except AutomodelDistError as exc:
        print(f"automodel-dist {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
