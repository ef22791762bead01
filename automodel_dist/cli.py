"""`automodel-dist`: a thin shell over the public API.

Exit codes: 0 success, 1 a config that fails (validation errors, nothing fits), 2 bad input.
A user's mistake is always a message, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from automodel_dist.errors import AutomodelDistError, InputError
from automodel_dist.output import Output, output_path, write_outputs
from automodel_dist.targets import TARGETS
from automodel_dist.textsafe import one_line, printable

if TYPE_CHECKING:
    from automodel_dist.compiler import CompileResult
    from automodel_dist.findings import Report
    from automodel_dist.html_report import ReportData


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


def _print(text: str) -> None:
    """A report or recipe to stdout, with any control character user text carried escaped (textsafe)."""
    sys.stdout.write(printable(text))


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "a non-negative integer")


def _aliased(aliases: dict[str, str]) -> Callable[[str], str]:
    """An argument type that reads an obvious alias as the name it stands for (argparse then checks choices)."""
    return lambda text: aliases.get(text, text)


def _print_compile_warnings(result: CompileResult) -> None:
    """Say on stderr what the written file's header warns of (a memory risk, fp8 trained as bf16)."""
    for warning in result.warnings():
        print(printable(f"automodel-dist compile: warning: {warning}"), file=sys.stderr)


def _compile_megatron(args: argparse.Namespace) -> int:
    from automodel_dist.targets.megatron_bridge.compile import compile_megatron

    if args.launcher == "skypilot":
        raise InputError("--target megatron-bridge launches with slurm only", hint="use --launcher slurm")
    if args.launcher and (args.format != "yaml" or not args.output):
        raise InputError("--launcher writes the override YAML and launch.sbatch beside it: it needs -o and the "
                         "yaml format", hint="add -o run/overrides.yaml and drop --format")
    out = None if args.output is None else output_path(args.output)
    result = compile_megatron(args.intent, args.overrides)
    _print_compile_warnings(result)
    if args.format == "json":
        text = json.dumps(result.to_json(), indent=2) + "\n"
    elif args.format == "hydra":
        text = result.hydra_text()
    else:
        text = result.yaml
    if out is None:
        _print(text)
        return 0
    outputs = [Output(out, text)]
    if args.launcher:
        from automodel_dist.targets.megatron_bridge.slurm import launch_script

        outputs.append(Output(out.parent / "launch.sbatch", launch_script(result, out.name)))
    written = write_outputs(outputs, inputs=result.inputs, force=args.force)
    _report_written(written)
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
    if args.launcher and args.output is None:
        raise InputError("--launcher needs -o/--output: the launch files are written beside the recipe",
                         hint="add -o run/recipe.yaml")
    out = None if args.output is None else output_path(args.output)
    result = compile_intent(args.intent, args.overrides)
    _print_compile_warnings(result)
    text = json.dumps(result.to_json(), indent=2) + "\n" if args.format == "json" else result.yaml
    if out is None:
        _print(text)
        return 0
    if args.launcher:  # it writes the recipe itself, with the launch settings, once the launch rules pass
        from automodel_dist.launch import write_launch_files

        written = [str(out), *write_launch_files(result, out, args.launcher, inputs=result.inputs, force=args.force)]
    else:
        write_outputs([Output(out, text)], inputs=result.inputs, force=args.force)
        written = [str(out)]
    _report_written(written)
    return 0


def _report_written(paths: Sequence[str | Path]) -> None:
    """'wrote <paths>' on stderr, each path escaped onto one line (a file name may hold a newline)."""
    print("wrote " + ", ".join(one_line(str(path)) for path in paths), file=sys.stderr)


def write_html_report(out: str, data: ReportData, *, inputs: Sequence[str | Path] = (),
                      force: bool = False) -> None:
    """Render the HTML report and write it through the one writer (`explain --html`, `dry-run --html`)."""
    from automodel_dist.html_report import render_page

    path = output_path(out, option="--html")
    write_outputs([Output(path, render_page(data))], inputs=inputs, force=force)
    _report_written([path])


def _cmd_explain(args: argparse.Namespace) -> int:
    from automodel_dist.compiler import compile_intent
    from automodel_dist.explain import render_explain

    result = compile_intent(args.intent, args.overrides, target=args.target)
    _print(render_explain(result, top=args.top, fmt=args.format))
    if args.html:
        from automodel_dist.html_report import from_compile

        write_html_report(args.html, from_compile(result, top=args.top), inputs=result.inputs, force=args.force)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from automodel_dist.report import render_report

    if args.target == "megatron-bridge":
        from automodel_dist.validate import header_recipe, validate_recipe
        from automodel_dist.yamlio import read_text_file

        if len(args.recipe) > 1:
            raise InputError("--target megatron-bridge judges one override file", hint="validate one file")
        text = read_text_file(args.recipe[0], what="override file", expected="the path of a .yaml file")
        recipe_function = args.recipe_function or header_recipe(text)
        if not recipe_function:
            raise InputError("--target megatron-bridge needs --recipe, the recipe function the overrides apply to "
                             "(the file has no `# recipe: NAME` header line)",
                             hint="e.g. --recipe deepseek_v3_pretrain_config")
        nodes, gpus_per_node = _world(args, text, args.recipe[0])
        report = validate_recipe(Path(args.recipe[0]), world_size=nodes * gpus_per_node, gpus_per_node=gpus_per_node,
                                 model=args.model, gpu=_gpu(args, text, args.recipe[0]),
                                 sbatch=Path(args.sbatch) if args.sbatch else None,
                                 target=args.target, recipe_function=recipe_function)
        _print(render_report(report, fmt=args.format))
        return 0 if report.ok else 1
    if args.recipe_function:
        raise InputError("--recipe names a Megatron-Bridge recipe function", hint="add --target megatron-bridge")
    if args.sbatch and len(args.recipe) > 1:
        raise InputError("--sbatch judges one launch script with one recipe", hint="validate one recipe with --sbatch")
    if len(args.recipe) == 1:
        report = _validate_one(args, args.recipe[0])
        _print(render_report(report, fmt=args.format))
        return 0 if report.ok else 1
    # Several recipes (a pre-commit hook passes every changed one): each is judged on its own, a bad file
    # is reported and the others still checked; the exit code is the worst.
    worst, reports = 0, []
    for recipe in args.recipe:
        try:
            report = _validate_one(args, recipe)
        except AutomodelDistError as exc:
            print(printable(f"automodel-dist validate: error: {exc}"), file=sys.stderr)
            worst = max(worst, exc.exit_code)
            continue
        reports.append(report)
        worst = max(worst, 0 if report.ok else 1)
        if args.format == "text":
            _print(render_report(report))
    if args.format == "json":
        _print(json.dumps([report.to_json() for report in reports], indent=2) + "\n")
    return worst


def _world(args: argparse.Namespace, text: str, path: str) -> tuple[int, int]:
    """(nodes, GPUs per node): each from its flag, else from the file's `# world: N x G` header line, else 1 x 8."""
    from automodel_dist.validate import stated_world

    return stated_world(args.nodes, args.gpus_per_node, text, path) or (1, 8)


def _gpu(args: argparse.Namespace, text: str, path: str) -> Any:
    """The flag's GPU, else the one the file's `# gpu: NAME` header line names (resolved here, so an unknown
    name is reported at that line's file, not at the flag), else None."""
    from automodel_dist.validate import header_gpu_spec

    return args.gpu if args.gpu is not None else header_gpu_spec(text, path)


def _validate_one(args: argparse.Namespace, recipe: str) -> Report:
    """One recipe at the world and GPU the flags give, else the ones its `# world: N x G` and `# gpu: NAME` header
    lines state, else 1 x 8 and no GPU."""
    from automodel_dist.validate import validate_recipe
    from automodel_dist.yamlio import read_text_file

    text = read_text_file(recipe, what="recipe file", expected="the path of a .yaml file")
    nodes, gpus_per_node = _world(args, text, recipe)
    return validate_recipe(recipe, world_size=nodes * gpus_per_node, gpus_per_node=gpus_per_node,
                           model=args.model, gpu=_gpu(args, text, recipe),
                           sbatch=Path(args.sbatch) if args.sbatch else None)


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from automodel_dist.verify.cli import run_dry_run

    return run_dry_run(args)


def _cmd_schema(args: argparse.Namespace) -> int:
    from automodel_dist.resources import INTENT_SCHEMA, RECIPE_SCHEMA, SCHEMAS_DIR

    names = {"intent": INTENT_SCHEMA, "recipe": RECIPE_SCHEMA}
    if args.write is None:
        if args.which is None:
            raise InputError("say which schema to print, or where to write both",
                             hint="automodel-dist schema intent | schema recipe | schema --write DIR")
        sys.stdout.write((SCHEMAS_DIR / names[args.which]).read_text(encoding="utf-8"))
        return 0
    # Editors are pointed at these files (README, Editors): a stable place, outside any one checkout.
    folder = Path(args.write)
    chosen = [names[args.which]] if args.which else list(names.values())
    outputs = [Output(folder / name, (SCHEMAS_DIR / name).read_text(encoding="utf-8")) for name in chosen]
    written = write_outputs(outputs, force=args.force)
    _report_written(written)
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
    p.add_argument("--force", action="store_true",
                   help="overwrite existing output files automodel-dist did not write (never the run's inputs)")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("explain", help="show the chosen layout, the runners-up and what was pruned")
    p.add_argument("intent", help="intent YAML file")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. training.seq_length=8192")
    p.add_argument("--top", type=_positive_int, default=10, help="how many runner-up layouts to show")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report (ranking, memory per "
                   "pipeline stage, step time, rank map)")
    p.add_argument("--force", action="store_true",
                   help="overwrite existing output files automodel-dist did not write (never the run's inputs)")
    p.add_argument("--target", choices=TARGETS, default="automodel")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("validate", help="check an existing AutoModel recipe before launching it")
    p.add_argument("recipe", nargs="+", help="AutoModel recipe YAML (several: each is judged on its own), or "
                   "Megatron-Bridge overrides with --target megatron-bridge")
    p.add_argument("--target", choices=TARGETS, default="automodel")
    p.add_argument("--recipe", dest="recipe_function", metavar="FUNCTION",
                   help="megatron-bridge: the recipe function, e.g. deepseek_v3_pretrain_config (default: the "
                   "override file's `# recipe: NAME` header line)")
    p.add_argument("--nodes", type=_positive_int,
                   help="nodes (default: the recipe's `# world: NODES x GPUS` header line, else 1)")
    p.add_argument("--gpus-per-node", type=_positive_int, help="GPUs per node (default: the header's, else 8)")
    p.add_argument("--model", help="model preset or Hugging Face id (default: model.pretrained_model_name_or_path)")
    p.add_argument("--gpu", help="GPU preset, e.g. h100-80gb (enables memory checks; default: the `# gpu:` header)")
    p.add_argument("--sbatch", metavar="PATH", help="the Slurm script that launches the recipe (judged with it)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("dry-run", help="build AutoModel's device meshes on CPU (needs the dryrun extra); with "
                       "--model, AutoModel's model itself on the meta device (needs the oracle extra)")
    p.add_argument("source", help="AutoModel recipe YAML, or an intent YAML (compiled first)")
    p.add_argument("--nodes", type=_positive_int, help="nodes (a recipe needs it; an intent carries its own)")
    p.add_argument("--gpus-per-node", type=_positive_int, help="GPUs per node (default 8 for a recipe)")
    p.add_argument("--rank", type=_non_negative_int, help="show this rank's coordinates and groups (default 0); "
                   "with --model, build only this rank")
    p.add_argument("--model", action="store_true",
                   help="build the model with AutoModel's own code for one rank of every pipeline stage")
    p.add_argument("--all-ranks", action="store_true", help="with --model, build every rank (small worlds)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report with the rank map "
                   "(from an intent, also the ranking, memory per stage and step time)")
    p.add_argument("--top", type=_positive_int, default=10, help="runner-up layouts in the --html report")
    p.add_argument("--force", action="store_true",
                   help="overwrite existing output files automodel-dist did not write (never the run's inputs)")
    p.set_defaults(func=_cmd_dry_run)

    p = sub.add_parser("schema", help="print a JSON Schema, or write both for an editor to use")
    p.add_argument("which", nargs="?", choices=("intent", "recipe"), metavar="SCHEMA",
                   help="intent or recipe (both when --write is given without one)")
    p.add_argument("--write", metavar="DIR", help="write the schema files (both unless one is named) into DIR")
    p.add_argument("--force", action="store_true", help="replace schema files in DIR that automodel-dist did not write")
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser("presets", help="list model or hardware presets")
    p.add_argument("which", choices=("models", "hardware"), metavar="KIND",
                   type=_aliased({"model": "models", "gpus": "hardware", "gpu": "hardware"}),
                   help="models, or hardware (the GPU presets; gpus also works)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_cmd_presets)
    return parser


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, with `a.b=c` overrides also after the options (`compile i.yaml --target X a.b=c`):
    argparse ends a positional list at the first option, so later overrides come back unrecognised."""
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in item and not item.startswith("-") for item in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_arguments(parser, argv)
    try:
        return args.func(args)
    except AutomodelDistError as exc:
        print(printable(f"automodel-dist {args.command}: error: {exc}"), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
