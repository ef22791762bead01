"""`bash -n` on a launch script's text: the shell's own parser, so a syntax error is found before sbatch runs it.

Run by the callers that read or write a script (`validate`, the launch writer), which hand the result to the
launch rules: the rules stay pure, this module starts the process. bash reads the script without running
any of it (`-n`), from
stdin (named /dev/stdin, so its errors carry line numbers), with no startup files and a bare environment
(no BASH_ENV to source). Where bash is missing, or does not answer in time, the check says it was not
made rather than guessing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 10
_LINE = re.compile(r"line (\d+): (.*)")
# `#!/bin/bash`, `#!/usr/bin/env bash`, `#!/bin/sh`: scripts bash -n can judge.
_SHELL_SHEBANG = re.compile(r"#!\s*(?:\S*/)?(?:env\s+)?(?:bash|sh)(?:\s|$)")


@dataclass(frozen=True)
class SyntaxResult:
    """`checked` is False when bash could not judge (`reason` says why); else `line`/`message` of the first error."""

    checked: bool
    line: int | None = None
    message: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.checked and self.line is None and not self.message


def script_syntax(text: str) -> SyntaxResult | None:
    """`bash_syntax` of a script whose #! line names bash or sh; None for any other script (nothing to judge)."""
    return bash_syntax(text) if _SHELL_SHEBANG.match(text) else None


def bash_syntax(text: str) -> SyntaxResult:
    """Parse `text` with `bash -n`; the first error's line and message, if any."""
    bash = shutil.which("bash")
    if bash is None:
        return SyntaxResult(False, reason="bash is not installed here")
    if not os.path.exists("/dev/stdin"):
        return SyntaxResult(False, reason="this system has no /dev/stdin for bash to read the script from")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    try:
        done = subprocess.run([bash, "--norc", "--noprofile", "-n", "/dev/stdin"],
                              input=text.encode("utf-8", "replace"), capture_output=True, env=env,
                              timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return SyntaxResult(False, reason=f"bash -n did not finish within {TIMEOUT_S} s")
    except OSError as exc:
        return SyntaxResult(False, reason=f"bash could not be started: {exc.strerror or exc}")
    if done.returncode == 0:
        return SyntaxResult(True)
    errors = done.stderr.decode("utf-8", "replace").strip().splitlines()
    last = max(1, len(text.splitlines()))
    for error in errors:
        match = _LINE.search(error)
        if match:  # an error at the end of the file is reported one line past it
            return SyntaxResult(True, line=min(int(match.group(1)), last), message=match.group(2).strip())
    # An error at the end of the input ("unexpected end of file") names no line: it is the last one.
    message = errors[0].removeprefix("bash: ") if errors else f"bash -n exited with {done.returncode}"
    return SyntaxResult(True, line=last, message=message)
