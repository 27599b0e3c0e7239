"""Event ids: format, order within a millisecond, threads, fork."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from itertools import pairwise

import pytest

from outboxd_producer import EventIdGenerator, new_event_id
from outboxd_producer import event_id as event_id_module

ID = re.compile(r"evt_([0-9a-f]{13})([0-9a-f]{16})")


def parts(event_id: str) -> tuple[int, int]:
    """(ms, tail) of an id."""
    match = ID.fullmatch(event_id)
    assert match, event_id
    return int(match.group(1), 16), int(match.group(2), 16)


def tails(values: list[int]) -> Iterator[int]:
    """A random_tail that returns ``values`` in turn."""
    return iter(values)


def test_format_is_evt_13_hex_ms_16_hex_tail() -> None:
    event_id = new_event_id(1_733_011_200_123)
    assert ID.fullmatch(event_id), event_id
    assert len(event_id) == 33
    assert parts(event_id)[0] == 1_733_011_200_123


def test_ids_of_one_millisecond_sort_in_the_order_they_were_made() -> None:
    ids = [new_event_id(5_000) for _ in range(1000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 1000
    numbers = [parts(i)[1] for i in ids]
    assert all(b == a + 1 for a, b in pairwise(numbers)), "tails are consecutive"


def test_a_new_millisecond_starts_from_a_random_tail() -> None:
    source = tails([41, 7, 1000])
    generator = EventIdGenerator(lambda: next(source))
    assert generator.new(10) == f"evt_{10:013x}{41:016x}"
    assert generator.new(10) == f"evt_{10:013x}{42:016x}"
    assert generator.new(11) == f"evt_{11:013x}{7:016x}"
    # Back to an earlier millisecond: a fresh random tail too (ids still sort by time first).
    assert generator.new(10) == f"evt_{10:013x}{1000:016x}"


def test_default_tails_are_random() -> None:
    firsts = {parts(new_event_id(ms))[1] for ms in range(10_000, 10_020)}
    assert len(firsts) == 20


def test_a_full_tail_starts_again_from_a_random_one_as_the_host_does() -> None:
    source = tails([2**64 - 2, 3])
    generator = EventIdGenerator(lambda: next(source))
    assert generator.new(1).endswith("f" * 15 + "e")
    assert generator.new(1).endswith("f" * 16)
    assert generator.new(1).endswith(f"{3:016x}")


def test_negative_milliseconds_clamp_to_zero() -> None:
    assert new_event_id(-5).startswith("evt_0000000000000")
    assert parts(new_event_id(-1))[0] == 0


def test_milliseconds_past_13_hex_digits_widen_like_the_host() -> None:
    assert new_event_id(2**52 - 1).startswith("evt_fffffffffffff")
    assert new_event_id(2**52).startswith("evt_10000000000000")


@pytest.mark.parametrize("bad", [1.5, "1", None, True])
def test_milliseconds_must_be_an_int(bad: object) -> None:
    with pytest.raises(TypeError, match="must be an int"):
        new_event_id(bad)  # type: ignore[arg-type]


def test_threads_share_one_sequence_without_repeats() -> None:
    """Many threads, one millisecond: every id distinct and the tails one unbroken run, so no
    increment was lost or repeated."""
    generator = EventIdGenerator(lambda: 0)
    per_thread, threads = 2000, 8
    results: list[list[str]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(slot: int) -> None:
        start.wait()
        results[slot].extend(generator.new(77) for _ in range(per_thread))

    workers = [threading.Thread(target=work, args=(slot,)) for slot in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    every = [event_id for result in results for event_id in result]
    assert sorted(parts(i)[1] for i in every) == list(range(per_thread * threads))
    for result in results:  # each thread saw its own ids increase
        assert result == sorted(result)


def test_module_generator_is_thread_safe() -> None:
    results: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        made = [new_event_id(123_456) for _ in range(1000)]
        with lock:
            results.extend(made)

    workers = [threading.Thread(target=work) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(set(results)) == 6000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_continue_the_parents_sequence() -> None:
    new_event_id(999)
    assert event_id_module._DEFAULT._last_ms == 999
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        os.write(write, str(event_id_module._DEFAULT._last_ms).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen = pipe.read()
    os.waitpid(pid, 0)
    assert seen == "-1"
