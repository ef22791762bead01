"""Every hostile or broken input the issue lists ends in seconds with exit 2 (bad input) or 1 (a config
that fails), a message that names the place, and no traceback. The cases live in
benchmarks/hostile_cases.py, which benchmarks/hostile_inputs.py also times as subprocesses."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from hostile_cases import HostileCase, build_cases
from time_bound import bounded

from automodel_dist.cli import main

with tempfile.TemporaryDirectory() as listing:  # only the names, for the test ids
    NAMES = [case.name for case in build_cases(Path(listing))]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostileCase]:
    return {case.name: case for case in build_cases(tmp_path_factory.mktemp("hostile"))}


@pytest.mark.parametrize("name", NAMES)
def test_hostile_input_fails_fast_and_located(name: str, cases: dict[str, HostileCase],
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    case = cases[name]
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    with bounded(case.name):
        code = main(list(case.argv))
    out, err = capsys.readouterr()
    assert code == case.exit_code, (out, err)
    assert case.where in out + err
    assert "Traceback" not in err
    if case.must_not_print:
        assert case.must_not_print not in out + err
