"""The inserted-row count of a MySQL upsert, with and without CLIENT_FOUND_ROWS."""

from __future__ import annotations

import pytest

from outboxd_producer.mysql_rows import CLIENT_FOUND_ROWS, found_rows_flag, inserted_rows


@pytest.mark.parametrize(
    ("affected", "rows", "existing", "inserted"),
    [
        (5, 5, 0, 5),  # all new (either flag)
        (3, 5, 2, 3),  # without FOUND_ROWS: duplicates count 0
        (0, 5, 5, 0),  # without FOUND_ROWS: all duplicates
        (5, 5, 2, 3),  # with FOUND_ROWS: duplicates count 1
        (5, 5, 5, 0),  # with FOUND_ROWS: all duplicates
        (1, 1, 1, 0),  # one duplicate with FOUND_ROWS
        (0, 1, 1, 0),  # one duplicate without
    ],
)
def test_inserted_rows(affected: int, rows: int, existing: int, inserted: int) -> None:
    assert inserted_rows(affected, rows, existing) == inserted


def test_found_rows_flag() -> None:
    class Conn:
        def __init__(self, flag: object) -> None:
            self.client_flag = flag

    assert CLIENT_FOUND_ROWS == 2
    assert found_rows_flag(Conn(2 | 1 | 512)) is True
    assert found_rows_flag(Conn(1 | 512)) is False
    assert found_rows_flag(Conn(None)) is None
    assert found_rows_flag(object()) is None
