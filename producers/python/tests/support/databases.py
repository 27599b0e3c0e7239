"""One database of its own per test, per backend (as the host's tests/support/mod.rs does):

- SQLite: a file in the test's temporary directory (``sqlite://<path>?mode=rwc`` for the host);
- MariaDB: ``CREATE DATABASE outboxd_py_<random>`` on ``mysql://root@127.0.0.1:3306/test``
  (override with ``OUTBOXD_TEST_MYSQL_URL``);
- PostgreSQL: ``CREATE DATABASE outboxd_py_<random>`` on
  ``postgres://postgres@127.0.0.1:5432/postgres`` (override with ``OUTBOXD_TEST_POSTGRES_URL``).

Server databases are dropped after the test (``OUTBOXD_TEST_KEEP_DB=1`` keeps them). A server that
does not answer skips the test with a loud reason, or fails it when ``CI`` is set.
"""

from __future__ import annotations

import os
import re
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit

import pytest

from outboxd_producer import Dialect

from .paths import MIGRATIONS

MYSQL_URL_ENV = "OUTBOXD_TEST_MYSQL_URL"
POSTGRES_URL_ENV = "OUTBOXD_TEST_POSTGRES_URL"
DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/test"
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"
CONNECT_TIMEOUT_S = 5

KINDS = ("sqlite", "mariadb", "postgres")


def in_ci() -> bool:
    """True when ``CI`` is set (to anything but empty): then a missing server fails."""
    return bool(os.environ.get("CI"))


def unavailable(what: str) -> NoReturn:
    """Skips the test loudly (``SKIPPED (<what>)``), or fails it when ``CI`` is set."""
    if in_ci():
        pytest.fail(f"{what} — CI is set, so this fails instead of skipping", pytrace=False)
    pytest.skip(f"{what} — set CI=1 to make this an error")


@dataclass
class TestDatabase:
    """A fresh database: its URL for the host and a way to open DB-API connections to it."""

    __test__ = False  # not a pytest test class

    kind: str
    dialect: Dialect
    url: str
    opener: Callable[..., Any]
    opened: list[Any] = field(default_factory=list)

    def connect(self, **kwargs: Any) -> Any:
        """A new DB-API connection to this database (closed at the end of the test at the latest,
        so that a failed test's open transaction cannot block dropping the database)."""
        conn = self.opener(**kwargs)
        self.opened.append(conn)
        return conn

    def close_all(self) -> None:
        """Closes every connection :meth:`connect` opened (rolling back what is uncommitted)."""
        for conn in self.opened:
            with suppress(Exception):  # already closed, or the server went away
                conn.close()
        self.opened.clear()

    @property
    def ph(self) -> str:
        """The driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg and PyMySQL)."""
        return "?" if self.dialect is Dialect.SQLITE else "%s"


def migration_statements(dialect: Dialect, table: str = "room_outbox") -> list[str]:
    """The statements of migration 0001 of ``dialect`` for ``table`` (comments stripped), for the
    tests that do not run the host's ``outboxd migrate``."""
    folder = {Dialect.SQLITE: "sqlite", Dialect.MYSQL: "mysql", Dialect.POSTGRES: "postgres"}[
        dialect
    ]
    text = (MIGRATIONS / folder / "0001_room_outbox.sql").read_text(encoding="utf-8")
    text = re.sub(r"--[^\n]*", "", text).replace("{{table}}", table)
    return [statement.strip() for statement in text.split(";") if statement.strip()]


def create_outbox_table(db: TestDatabase, table: str = "room_outbox") -> None:
    """Creates ``table`` in ``db`` from the repository's migration 0001."""
    conn = db.connect()
    try:
        cursor = conn.cursor()
        for statement in migration_statements(db.dialect, table):
            cursor.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _keep() -> bool:
    return bool(os.environ.get("OUTBOXD_TEST_KEEP_DB"))


def _new_name() -> str:
    return f"outboxd_py_{secrets.token_hex(6)}"


@contextmanager
def sqlite_database(directory: Path) -> Iterator[TestDatabase]:
    """A SQLite file in ``directory`` (removed with the test's temporary directory)."""
    path = directory / "outbox.db"

    def connect(**kwargs: Any) -> Any:
        return sqlite3.connect(path, **kwargs)

    db = TestDatabase("sqlite", Dialect.SQLITE, f"sqlite://{path}?mode=rwc", connect)
    try:
        yield db
    finally:
        db.close_all()


@contextmanager
def mariadb_database() -> Iterator[TestDatabase]:
    """A fresh MariaDB/MySQL database, dropped afterwards."""
    import pymysql

    server = os.environ.get(MYSQL_URL_ENV) or DEFAULT_MYSQL_URL
    parts = urlsplit(server)
    params: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "connect_timeout": CONNECT_TIMEOUT_S,
        "charset": "utf8mb4",
    }
    try:
        admin = pymysql.connect(**params, autocommit=True)
    except pymysql.MySQLError as error:
        unavailable(f"no MariaDB at {parts.hostname}:{parts.port}: {error}")
    name = _new_name()
    try:
        with admin.cursor() as cursor:
            # Dropping waits at most 30 s for a metadata lock (not MariaDB's default year).
            cursor.execute("SET SESSION lock_wait_timeout = 30")
            cursor.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")

        def connect(**kwargs: Any) -> Any:
            # A test stuck on a row lock fails in 10 s instead of InnoDB's default 50 s.
            kwargs.setdefault("init_command", "SET SESSION innodb_lock_wait_timeout = 10")
            return pymysql.connect(**params, database=name, **kwargs)

        url = parts._replace(path=f"/{name}", query="").geturl()
        db = TestDatabase("mariadb", Dialect.MYSQL, url, connect)
        try:
            yield db
        finally:
            db.close_all()
    finally:
        if not _keep():
            with admin.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


@contextmanager
def postgres_database() -> Iterator[TestDatabase]:
    """A fresh PostgreSQL database, dropped afterwards (``WITH (FORCE)``: a host that is still
    connected cannot keep it)."""
    import psycopg

    server = os.environ.get(POSTGRES_URL_ENV) or DEFAULT_POSTGRES_URL
    parts = urlsplit(server)
    try:
        admin = psycopg.connect(server, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as error:
        unavailable(f"no PostgreSQL at {parts.hostname}:{parts.port}: {error}".strip())
    name = _new_name()
    try:
        admin.execute(f"CREATE DATABASE {name}")
        url = parts._replace(path=f"/{name}").geturl()

        def connect(**kwargs: Any) -> Any:
            return psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, **kwargs)

        db = TestDatabase("postgres", Dialect.POSTGRES, url, connect)
        try:
            yield db
        finally:
            db.close_all()
    finally:
        if not _keep():
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
