"""Telling the dialect and parameter style from a connection or cursor."""

from __future__ import annotations

import sqlite3

import pytest

from outboxd_producer import Dialect, DialectError
from outboxd_producer.dialect import paramstyle_of, resolve_dialect


def fake(module: str, name: str = "Connection") -> object:
    """An instance of a class that claims to come from ``module``."""
    return type(name, (), {"__module__": module})()


def test_sqlite3_connections_and_cursors() -> None:
    conn = sqlite3.connect(":memory:")
    assert resolve_dialect(conn) is Dialect.SQLITE
    assert resolve_dialect(conn.cursor()) is Dialect.SQLITE
    assert paramstyle_of(conn) == "qmark"


def test_psycopg_and_pymysql_classes() -> None:
    import psycopg
    import pymysql

    assert psycopg.Connection.__module__.split(".")[0] == "psycopg"
    assert resolve_dialect(fake(psycopg.Connection.__module__)) is Dialect.POSTGRES
    assert resolve_dialect(fake(psycopg.Cursor.__module__, "Cursor")) is Dialect.POSTGRES
    assert resolve_dialect(fake(pymysql.connections.Connection.__module__)) is Dialect.MYSQL
    assert resolve_dialect(fake(pymysql.cursors.Cursor.__module__, "Cursor")) is Dialect.MYSQL
    assert paramstyle_of(fake("psycopg.connection")) == "pyformat"
    assert paramstyle_of(fake("pymysql.connections")) == "pyformat"


@pytest.mark.parametrize(
    ("module", "dialect"),
    [("psycopg2.extensions", Dialect.POSTGRES), ("MySQLdb.connections", Dialect.MYSQL),
     ("mysql.connector.connection_cext", Dialect.MYSQL), ("mariadb.connections", Dialect.MYSQL)],
)  # fmt: skip
def test_other_known_drivers(module: str, dialect: Dialect) -> None:
    assert resolve_dialect(fake(module)) is dialect


@pytest.mark.parametrize(
    ("given", "dialect"),
    [("postgres", Dialect.POSTGRES), ("PostgreSQL", Dialect.POSTGRES), ("mysql", Dialect.MYSQL),
     ("mariadb", Dialect.MYSQL), ("sqlite", Dialect.SQLITE), (Dialect.MYSQL, Dialect.MYSQL)],
)  # fmt: skip
def test_a_given_dialect_wins(given: str, dialect: Dialect) -> None:
    assert resolve_dialect(sqlite3.connect(":memory:"), given) is dialect


def test_unknown_dialects_are_errors() -> None:
    with pytest.raises(DialectError, match="unknown dialect 'oracle'"):
        resolve_dialect(sqlite3.connect(":memory:"), "oracle")
    with pytest.raises(DialectError, match="cannot tell the SQL dialect of a mydriver.Connection"):
        resolve_dialect(fake("mydriver"))


def test_a_driver_without_paramstyle_gets_its_dialects_default() -> None:
    assert paramstyle_of(fake("nosuchdriver")) == "format"
