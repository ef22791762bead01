"""The recipe fixtures in tests/fixtures/recipes and the headers they carry.

Every fixture states where it runs (`# world: NODES x GPUS`); every invalid one also states the key it
must fail at and a word of the reason (`# expect: dotted.key | reason`).
"""

from __future__ import annotations

import re
from pathlib import Path

RECIPES = Path(__file__).parent / "fixtures" / "recipes"
VALID = sorted((RECIPES / "valid").glob("*.yaml"))
INVALID = sorted((RECIPES / "invalid").glob("*.yaml"))

_WORLD = re.compile(r"^# world: (\d+) x (\d+)$", re.MULTILINE)
_EXPECT = re.compile(r"^# expect: (\S+) \| (.+)$", re.MULTILINE)


def fixture_world(path: Path) -> tuple[int, int]:
    """(nodes, GPUs per node) from the fixture's `# world: NODES x GPUS` header."""
    match = _WORLD.search(path.read_text(encoding="utf-8"))
    assert match, f"{path.name}: needs a '# world: NODES x GPUS' header"
    return int(match.group(1)), int(match.group(2))


def fixture_world_size(path: Path) -> int:
    nodes, gpus_per_node = fixture_world(path)
    return nodes * gpus_per_node


def fixture_expect(path: Path) -> tuple[str, str]:
    """(dotted key, reason) from an invalid fixture's `# expect: dotted.key | reason` header."""
    match = _EXPECT.search(path.read_text(encoding="utf-8"))
    assert match, f"{path.name}: needs an '# expect: dotted.key | reason' header"
    return match.group(1), match.group(2)
