"""Import Megatron-Bridge's published performance tables (every release, every revision) as measurement rows.

    python benchmarks/import_measurements.py GIT_DIR > benchmarks/measurements/megatron_bridge.csv

GIT_DIR is a clone of NVIDIA-NeMo/Megatron-Bridge. Every commit that touched `docs/performance-summary.md`
or `docs/performance-summary-archive.md` is read; each table row becomes one measurement, keyed by
release, task, system, model, precision and layout, and the newest revision of a row wins (later commits
fix typos). A cell "a (b)" gives two runs: the release notes say the parenthesised figure used another
quantization granularity (25.09/25.11: FP8 blockwise on H100, MXFP8 on Blackwell); the layout cells of
such a row follow the same convention. Only the rows, the facts, are committed, not the pages.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from collections.abc import Iterator

DOCS = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
REPO = "NVIDIA-NeMo/Megatron-Bridge"
FIELDS = ("framework", "release", "task", "system", "model", "gpus", "precision", "gbs", "mbs", "seq", "fsdp",
          "tp", "pp", "cp", "vp", "ep", "tokens_per_s_per_gpu", "tflops_per_gpu", "source", "notes")
HEADER_NAMES = {"#-GPUs": "gpus", "GBS": "gbs", "MBS": "mbs", "Sequence Length": "seq", "FSDP": "fsdp",
                "TP": "tp", "PP": "pp", "CP": "cp", "VP": "vp", "EP": "ep", "GA": "ga",
                "Tokens / sec / GPU": "tokens_per_s_per_gpu", "Model TFLOP / sec / GPU": "tflops_per_gpu",
                "Precision": "precision", "System": "system", "Model": "model"}
# 25.09 and 25.11 have no precision column: FP8 (per-tensor current scaling) outside, blockwise inside.
ALTERNATE_PRECISION = {"DGX-H100": ("FP8", "FP8-blockwise")}
DEFAULT_PRECISION = ("FP8", "MXFP8")


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True).stdout


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _split(cell: str) -> tuple[str, str]:
    """'a (b)' -> (a, b); 'a' -> (a, a); footnote marks dropped."""
    cell = re.sub(r"\[\^[^\]]*\]", "", cell).strip()
    m = re.fullmatch(r"(.*?)\s*\((.*)\)", cell)
    return (m.group(1).strip(), m.group(2).strip()) if m else (cell, cell)


def parse(text: str, commit: str, path: str) -> Iterator[dict[str, str]]:
    release = task = system = model = ""
    header: list[str] = []
    for line in text.splitlines():
        if m := re.match(r"## (\S+) NeMo Container", line):
            release = m.group(1)
        elif line.startswith("### "):
            task = line[4:].replace(" Performance", "").strip().lower()
        elif m := re.match(r"#### System: (.*)", line):
            system, model = m.group(1).strip(), ""
        elif m := re.match(r"#### Model: (.*)", line):
            model, system = m.group(1).strip(), ""
        elif line.startswith("| System") or line.startswith("| Model"):
            header = [HEADER_NAMES.get(c, c) for c in _cells(line)]
        elif line.startswith("|--") or line.startswith("| --"):
            continue
        elif line.startswith("|") and header and release:
            cells = _cells(line)
            if len(cells) != len(header):
                continue
            raw = dict(zip(header, cells, strict=True))
            raw.setdefault("system", system)
            raw.setdefault("model", model)
            tags = re.findall(r"\(([^)]*)\)", raw["model"])  # (tokendrop), (dropless), (w/o MTP)
            raw["model"] = re.sub(r"\s*\([^)]*\)", "", raw["model"]).strip()
            alternate = any("(" in c for c in raw.values())
            for variant in (0, 1) if alternate else (0,):
                row = {k: _split(v)[variant] for k, v in raw.items()}
                if "precision" not in row:
                    row["precision"] = ALTERNATE_PRECISION.get(row["system"], DEFAULT_PRECISION)[variant]
                # FSDP is a switch in 25.09-26.04 ("1" on, "0" Megatron's distributed optimizer) and a size later
                row["fsdp"] = "0" if row.get("fsdp", "") in ("", "0") else "1"
                notes = list(tags)
                if alternate:
                    notes.append("parenthesised variant" if variant else "primary variant")
                yield {**{k: row.get(k, "") for k in FIELDS}, "framework": "megatron-bridge", "release": release,
                       "task": task or "pre-training", "source": f"{REPO} {path}@{commit[:12]}",
                       "notes": "; ".join(notes)}


def collect(git_dir: str) -> list[dict[str, str]]:
    commits = git(git_dir, "log", "--reverse", "--format=%H", "--", *DOCS).split()
    rows: dict[tuple, dict[str, str]] = {}
    for commit in commits:
        for path in DOCS:
            try:
                text = git(git_dir, "show", f"{commit}:{path}")
            except subprocess.CalledProcessError:
                continue
            for row in parse(text, commit, path):
                key = tuple(row[k] for k in FIELDS[:16])
                rows[key] = row  # the newest revision of the same run wins
    return sorted(rows.values(), key=lambda r: tuple(r[k] for k in ("release", "task", "model", "system", "gpus",
                                                                    "precision", "gbs", "mbs", "tp", "pp", "vp",
                                                                    "ep", "cp")))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    writer = csv.DictWriter(sys.stdout, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(collect(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
