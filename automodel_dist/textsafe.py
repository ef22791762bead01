"""Characters that must never reach a generated file raw, and the one way user text is made safe for a comment.

A comment cannot quote: a newline (or anything a reader takes for one: CR, VT, FF, NEL U+0085, the
Unicode line and paragraph separators) in a model name ends the comment, and the rest of the name
becomes a shell command in `launch.sbatch` or a key in the recipe. Other control characters (NUL,
ESC, DEL, the C1 set) and the bidirectional overrides that make text read differently than it runs
have no business in a script or a recipe either. `one_line` writes each as its escape (`\\n`,
`\\u2028`), so the text stays readable and on its line.
"""

from __future__ import annotations

import re

# C0 and C1 controls (newline and tab included), DEL, the Unicode line/paragraph separators, and the
# bidirectional marks, embeddings, overrides and isolates.
UNSAFE_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What a generated file may hold besides printable text: its own line breaks and tabs.
_FILE_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """`text` with every unsafe character written as its escape: 'a\\nb' (3 characters become 4), never a line break."""
    return UNSAFE_CHARS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def printable(text: str) -> str:
    """Text for a terminal or a file: its own newlines and tabs kept, every other unsafe character escaped
    (an ESC from a model name would otherwise drive the reader's terminal)."""
    return _FILE_UNSAFE.sub(lambda m: one_line(m.group()), text)


def first_unsafe(text: str, *, in_file: bool = False) -> tuple[int, str] | None:
    """(offset, escaped character) of the first unsafe character, None if there is none.

    `in_file`: judge a whole generated file, whose own newlines and tabs are fine.
    """
    match = (_FILE_UNSAFE if in_file else UNSAFE_CHARS).search(text)
    return (match.start(), one_line(match.group())) if match else None
