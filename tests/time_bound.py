"""A loose time bound for one hostile or fuzzed input, robust on a shared machine.

The hangs and blow-ups these tests guard against took minutes or never ended. CPU time of this process
is the bound (other jobs on a busy CI machine do not count against it); wall time is bounded too, far
more loosely, for a case that would block on a pipe without using any CPU.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

CPU_SECONDS = 10.0
WALL_SECONDS = 60.0


@contextmanager
def bounded(what: object) -> Iterator[None]:
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert cpu < CPU_SECONDS and wall < WALL_SECONDS, (what, f"cpu {cpu:.1f} s", f"wall {wall:.1f} s")
