"""Model-dry-run every AutoModel recipe in a folder at its world size, AutoModel's verdict beside validate's.

    python benchmarks/model_dry_run_corpus.py FOLDER [--limit N] [--max-world W]

Each recipe's world size and validate verdict come from benchmarks/recipe_corpus.py (its `ci:` block,
launcher section or comments; CI overrides applied). Then AutoModel itself builds the model on the meta
device for one rank of every pipeline stage (needs the `oracle` extra; one worker process serves every
recipe). A recipe whose model is neither in the catalog nor a readable config.json is counted, not built.

Per recipe: world size, validate's errors, AutoModel's verdict (built, or the rule its error falls under
and its first line), seconds. Then the agreement table: both accept; validate rejects what AutoModel
builds (validate's rule may judge what the model build does not reach: batch sizes, schedules at run
time); validate accepts what AutoModel refuses (a rule to learn: the case this benchmark exists for).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from recipe_corpus import judge_recipe

from automodel_dist.errors import AutomodelDistError
from automodel_dist.verify.model_dryrun import ModelWorker, build_model_dry_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="folder searched recursively for *.yaml recipes")
    parser.add_argument("--limit", type=int, default=0, help="judge at most this many recipes (0: all)")
    parser.add_argument("--max-world", type=int, default=4096, help="skip larger worlds (slow fake-PG set-up)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    paths = sorted(p for p in args.folder.rglob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    if args.limit:
        paths = paths[:args.limit]
    table: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    per_rank: list[float] = []
    with ModelWorker() as worker:
        print(f"AutoModel worker ready: import {worker.import_s:.1f} s", flush=True)
        for path in paths:
            name = path.relative_to(args.folder)
            outcome = judge_recipe(path)
            if outcome.input_error or outcome.diffusion or outcome.world.size > args.max_world:
                table["not judged (input error, diffusion or too large)"] += 1
                continue
            start = time.perf_counter()
            try:
                report = build_model_dry_run(outcome.run, world_size=outcome.world.size,
                                             gpus_per_node=outcome.world.gpus_per_node, worker=worker)
            except AutomodelDistError as exc:
                table["not built (model not readable here)"] += 1
                print(f"{name}: world {outcome.world.size}: not built: {str(exc).splitlines()[0][:120]}")
                continue
            seconds = time.perf_counter() - start
            if not report.ranks:  # judged but not built (MegatronFSDP): the report's note says why
                table["not built (the dry-run says why)"] += 1
                print(f"{name}: world {outcome.world.size}: not built: {report.notes[0].message[:120]}")
                continue
            per_rank += [rank.seconds for rank in report.ranks]
            errors = report.errors
            automodel = "builds" if report.ok else f"REFUSES [{errors[0].rule}] {errors[0].message[:140]}"
            validate = "accepts" if outcome.clean else f"rejects {' '.join(sorted(set(outcome.errors)))}"
            key = {(True, True): "both accept", (False, False): "both reject",
                   (False, True): "validate rejects, AutoModel builds",
                   (True, False): "validate accepts, AutoModel refuses"}[(outcome.clean, report.ok)]
            table[key] += 1
            refused.update(f.rule for f in errors)
            print(f"{name}: world {outcome.world.size} ({outcome.world.source}) validate {validate}; AutoModel "
                  f"{automodel} ({len(report.ranks)} rank(s), {seconds:.1f} s)", flush=True)
    print(f"\n{len(paths)} recipes:")
    for key, count in table.most_common():
        print(f"  {count:4d}  {key}")
    if refused:
        print("AutoModel's refusals by rule: " + ", ".join(f"{rule} {n}" for rule, n in refused.most_common()))
    if per_rank:
        per_rank.sort()
        print(f"per rank: median {per_rank[len(per_rank) // 2]:.2f} s, max {per_rank[-1]:.2f} s "
              f"({len(per_rank)} ranks)")
    return 0 if not table["validate accepts, AutoModel refuses"] else 1


if __name__ == "__main__":
    sys.exit(main())
