"""Fixtures: a fresh database per test (``sqlite_db``, ``mariadb_db``, ``postgres_db``, and ``db``
parametrized over the three), with the outbox table (``outbox_db``) or without."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.databases import (
    KINDS,
    TestDatabase,
    create_outbox_table,
    in_ci,
    mariadb_database,
    postgres_database,
    sqlite_database,
)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[TestDatabase]:
    """A fresh SQLite file."""
    with sqlite_database(tmp_path) as db:
        yield db


@pytest.fixture
def mariadb_db() -> Iterator[TestDatabase]:
    """A fresh MariaDB database (skipped loudly, or failed in CI, without a server)."""
    with mariadb_database() as db:
        yield db


@pytest.fixture
def postgres_db() -> Iterator[TestDatabase]:
    """A fresh PostgreSQL database (skipped loudly, or failed in CI, without a server)."""
    with postgres_database() as db:
        yield db


@pytest.fixture(params=KINDS)
def db(request: pytest.FixtureRequest) -> TestDatabase:
    """Each of the three databases in turn."""
    database: TestDatabase = request.getfixturevalue(f"{request.param}_db")
    return database


@pytest.fixture
def outbox_db(db: TestDatabase) -> TestDatabase:
    """Each database in turn, with ``room_outbox`` made by the repository's migration 0001."""
    create_outbox_table(db)
    return db


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Repeats skipped tests at the very end, in capitals: a missing database or host binary must
    not pass unnoticed."""
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped and not in_ci():
        terminalreporter.write_sep(
            "!",
            f"{len(skipped)} TEST(S) SKIPPED: a database or the host binary is missing (see above)",
        )
