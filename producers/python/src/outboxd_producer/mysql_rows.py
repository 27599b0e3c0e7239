"""How many rows a MySQL/MariaDB ``INSERT … ON DUPLICATE KEY UPDATE event_id = event_id`` inserted.

MySQL's affected-row count for that statement is 1 per inserted row and 0 per duplicate — unless
the connection was opened with the ``CLIENT_FOUND_ROWS`` flag (SQLAlchemy's MySQL dialects set it;
PyMySQL's default does not), which counts a duplicate as 1 too. So, where the flag may be on, the
ids already present are counted first (:func:`outboxd_producer.sql.count_existing`) as the host
does, and :func:`inserted_rows` tells the two cases apart from the affected count itself.
"""

from __future__ import annotations

#: MySQL's ``CLIENT_FOUND_ROWS`` capability flag.
CLIENT_FOUND_ROWS = 1 << 1


def found_rows_flag(connection: object) -> bool | None:
    """Whether ``connection`` (a PyMySQL or mysqlclient connection) has ``CLIENT_FOUND_ROWS`` on;
    ``None`` when the driver does not say."""
    flags = getattr(connection, "client_flag", None)
    if isinstance(flags, int) and not isinstance(flags, bool):
        return bool(flags & CLIENT_FOUND_ROWS)
    return None


def inserted_rows(affected: int, rows: int, existing: int) -> int:
    """Rows inserted by a MySQL upsert of ``rows`` distinct ids that reported ``affected`` rows,
    ``existing`` of the ids having been present just before.

    Without ``CLIENT_FOUND_ROWS`` every duplicate counts 0, so ``affected`` is the answer and is
    below ``rows`` whenever one id was there; with it every row counts 1 (``affected == rows``) and
    the answer is ``rows - existing``. When ``affected == rows`` both readings agree.
    """
    if affected < rows:
        return max(affected, 0)
    return max(rows - existing, 0)
