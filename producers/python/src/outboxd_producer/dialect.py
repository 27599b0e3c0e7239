"""Which SQL dialect and DB-API parameter style a connection or cursor speaks, told from the
driver module its class comes from (psycopg → PostgreSQL, PyMySQL → MySQL/MariaDB, sqlite3 →
SQLite) unless the caller names the dialect."""

from __future__ import annotations

import sys
from enum import Enum

from .errors import DialectError


class Dialect(str, Enum):
    """The SQL dialects the outbox table exists in."""

    POSTGRES = "postgres"
    MYSQL = "mysql"
    SQLITE = "sqlite"


#: Accepted spellings of each dialect (``dialect=`` takes any of them, or a :class:`Dialect`).
ALIASES: dict[str, Dialect] = {
    "postgres": Dialect.POSTGRES,
    "postgresql": Dialect.POSTGRES,
    "mysql": Dialect.MYSQL,
    "mariadb": Dialect.MYSQL,
    "sqlite": Dialect.SQLITE,
    "sqlite3": Dialect.SQLITE,
}

#: The dialect of each known DB-API driver, by top-level package name.
DRIVERS: dict[str, Dialect] = {
    "psycopg": Dialect.POSTGRES,
    "psycopg2": Dialect.POSTGRES,
    "pg8000": Dialect.POSTGRES,
    "pymysql": Dialect.MYSQL,
    "MySQLdb": Dialect.MYSQL,
    "mysql": Dialect.MYSQL,  # mysql-connector-python
    "mariadb": Dialect.MYSQL,
    "sqlite3": Dialect.SQLITE,
    "pysqlite2": Dialect.SQLITE,
}

#: The DB-API ``paramstyle`` values :mod:`outboxd_producer.sql` can write.
PARAMSTYLES = ("qmark", "numeric", "named", "format", "pyformat")


def driver_module(obj: object) -> str:
    """The top-level package of the class of ``obj`` (e.g. ``psycopg`` for a
    ``psycopg.Connection`` or ``psycopg.Cursor``)."""
    return type(obj).__module__.split(".", 1)[0]


def resolve_dialect(obj: object, dialect: Dialect | str | None = None) -> Dialect:
    """``dialect`` checked and normalized, or (when ``None``) the dialect of the driver that made
    ``obj``, a connection or a cursor."""
    if dialect is not None:
        if isinstance(dialect, Dialect):
            return dialect
        found = ALIASES.get(str(dialect).lower())
        if found is None:
            raise DialectError(
                f"unknown dialect {dialect!r}: use one of {', '.join(sorted(ALIASES))}"
            )
        return found
    module = driver_module(obj)
    found = DRIVERS.get(module)
    if found is None:
        raise DialectError(
            f"cannot tell the SQL dialect of a {type(obj).__module__}.{type(obj).__qualname__}: "
            "pass dialect='postgres', 'mysql' or 'sqlite'"
        )
    return found


def paramstyle_of(obj: object) -> str:
    """The DB-API ``paramstyle`` of the driver that made ``obj`` (its module's ``paramstyle``
    attribute), ``qmark`` for SQLite drivers and ``format`` for any other driver that does not
    say."""
    module = sys.modules.get(driver_module(obj))
    style = getattr(module, "paramstyle", None)
    if style is None:
        style = "qmark" if DRIVERS.get(driver_module(obj)) is Dialect.SQLITE else "format"
    if style not in PARAMSTYLES:
        raise DialectError(f"unsupported DB-API paramstyle {style!r} of {driver_module(obj)}")
    return str(style)
