"""Memory given back: when to trim (pure, and the trimmer's task on a mock clock), that glibc's
``malloc_trim`` gives back free pages that ``free`` kept, and that ``relaunch`` starts the
process again with the system allocator unless the operator chose one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from codemojex.allocator import GLIBC, Departures, Trimmer, trim

ROOT = Path(__file__).resolve().parents[2]


def test_departures_say_trim_once_a_crowd_has_left() -> None:
    leaving = Departures(min_drop=50)
    assert [leaving.seen(n) for n in (0, 10, 300, 280, 260)] == [False] * 5  # 40 left so far
    assert leaving.seen(200)  # 100 below the highest: trim
    assert not leaving.seen(190)  # counted from 200 now
    assert [leaving.seen(n) for n in (500, 449, 450)] == [False, True, False]


@pytest.mark.timeout_s(300)  # virtual seconds: the mock clock's
async def test_the_trimmer_trims_once_the_viewers_stop_leaving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Looked at every second: 300 viewers, then they leave over seconds 3-5; then quiet.
    counts = iter([300, 300, 200, 100, 0] + [0] * 90)
    trims: list[float] = []
    start = trio.current_time()

    def count_trim() -> bool:
        trims.append(trio.current_time() - start)
        return True

    tidies: list[float] = []

    def count_tidy() -> bool:
        tidies.append(trio.current_time() - start)
        return False

    trimmer = Trimmer(lambda: next(counts), every_s=1.0, settle_s=5.0, again_s=60.0,
                      trim_fn=count_trim, tidy_every_s=30.0, tidy_fn=count_tidy)  # fmt: skip
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trimmer.run)
        await trio.sleep(90.5)
        nursery.cancel_scope.cancel()
    # Falls of 100 seen at seconds 3, 4 and 5: a trim 5 s after the last, one more 60 s later.
    assert trims == [10.0, 70.0]
    # The periodic tidy counts from the last trim of either kind: 30 s after each.
    assert tidies == [40.0]
    stats = trimmer.statistics()
    assert (stats.trims, stats.given_back, stats.tidies) == (2, 2, 1)


@pytest.mark.timeout_s(600)  # virtual seconds: the mock clock's
async def test_the_trimmer_tidies_every_minute_with_no_viewers_at_all(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    tidies: list[float] = []

    def count_tidy() -> bool:
        tidies.append(trio.current_time() - start)
        return True

    def no_trim() -> bool:
        raise AssertionError("no viewer left: nothing to collect")

    trimmer = Trimmer(lambda: 0, trim_fn=no_trim, tidy_fn=count_tidy)  # the defaults
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trimmer.run)
        await trio.sleep(300.5)
        nursery.cancel_scope.cancel()
    assert tidies == [60.0, 120.0, 180.0, 240.0, 300.0]
    assert trimmer.statistics().tidies == 5


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_malloc_trim_gives_back_the_pages_free_kept() -> None:
    # Blocks of 16 KiB, each followed by a small one that stays: freeing the big ones leaves
    # holes in the middle of the heap, which free() keeps and malloc_trim gives back.
    kept, big = [], []
    for n in range(4000):
        big.append(bytes(16384) + n.to_bytes(4, "big"))
        kept.append(bytes(600) + n.to_bytes(4, "big"))
    del big
    held = _rss_kib()
    assert trim()  # gc, then malloc_trim: something was given back
    assert _rss_kib() < held - 30 * 1024  # most of the 64 MiB of holes
    assert len(kept) == 4000


@pytest.mark.parametrize(("given", "runs_with"), [(None, "malloc"), ("pymalloc", "pymalloc")])
def test_relaunch_starts_again_with_the_system_allocator(given: str | None, runs_with: str) -> None:
    code = ("import os; from codemojex.allocator import relaunch; relaunch(); "
            "print(os.environ['PYTHONMALLOC'], os.getpid())")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
    env["PYTHONPATH"] = str(ROOT)
    if given is not None:
        env["PYTHONMALLOC"] = given
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    out, _ = proc.communicate(timeout=60)
    assert out.split() == [runs_with, str(proc.pid)]  # once, by the same process
