"""Monthly partitions of ``accounting_usagehour`` on PostgreSQL (migration 0009 made the table
partitioned by RANGE on ``hour``; other databases keep one plain table).

Each month is a partition ``accounting_usagehour_pYYYYMM`` holding [first of the month, first of the
next) in UTC; a DEFAULT partition takes rows of months that have none yet. The rollup creates a
month's partition before it writes there (``ensure_month``: rows the default partition held for that
month move with it) and rebuilds a whole month as a new table swapped in at the end (``swap_month``):
rows are written with no index to maintain, the indexes are built once, and readers see the old month
until the transaction commits.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

PARENT = "accounting_usagehour"
DEFAULT = "accounting_usagehour_default"


def month_start(at: datetime) -> datetime:
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def next_month(month: datetime) -> datetime:
    return datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)


def months_of(first: datetime, last: datetime) -> list[datetime]:
    """The first instant of every month from ``first``'s to ``last``'s, inclusive (UTC)."""
    months, month = [], month_start(first)
    while month <= last:
        months.append(month)
        month = next_month(month)
    return months


def month_table(month: datetime) -> str:
    return f"{PARENT}_p{month:%Y%m}"


def is_partitioned(cursor: Any) -> bool:
    cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = %s::regclass)", [PARENT])
    return bool(cursor.fetchone()[0])


def _exists(cursor: Any, table: str) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
    return bool(cursor.fetchone()[0])


def new_table(cursor: Any, table: str) -> None:
    """A standalone table shaped like the parent (columns, defaults, checks), with no index yet."""
    cursor.execute(f"DROP TABLE IF EXISTS {table}")
    cursor.execute(f"CREATE TABLE {table} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")


def index_statements(table: str) -> list[str]:
    """The parent's indexes on ``table`` (ATTACH adopts them instead of building its own); each can be
    built on a connection of its own at the same time."""
    return [
        f"CREATE UNIQUE INDEX {table}_unique ON {table} (unit_id, flavor_id, hour)",
        f"CREATE INDEX {table}_hour ON {table} (hour)",
    ]


def unique_constraint(cursor: Any, table: str) -> None:
    """The unique index as the constraint the parent's matches (ON CONFLICT and ATTACH need it)."""
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_unique UNIQUE USING INDEX {table}_unique")


def index_table(cursor: Any, table: str) -> None:
    for statement in index_statements(table):
        cursor.execute(statement)
    unique_constraint(cursor, table)


def _attach(cursor: Any, table: str, month: datetime) -> None:
    """Attach ``table`` as ``month``'s partition. A CHECK matching the partition's range first, so
    PostgreSQL need not scan the table to prove it; the month's rows leave the DEFAULT partition."""
    bounds = [month, next_month(month)]
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_range CHECK (hour >= %s AND hour < %s)", bounds)
    cursor.execute(f"DELETE FROM {DEFAULT} WHERE hour >= %s AND hour < %s", bounds)
    cursor.execute(f"ALTER TABLE {PARENT} ATTACH PARTITION {table} FOR VALUES FROM (%s) TO (%s)", bounds)
    cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_range")


def ensure_month(cursor: Any, month: datetime) -> None:
    """``month``'s partition, created if missing, with the rows the DEFAULT partition held for it."""
    table = month_table(month)
    if _exists(cursor, table):
        return
    new_table(cursor, table)
    cursor.execute(
        f"INSERT INTO {table} SELECT * FROM {DEFAULT} WHERE hour >= %s AND hour < %s", [month, next_month(month)]
    )
    index_table(cursor, table)
    _attach(cursor, table, month)


def swap_month(cursor: Any, built: str, month: datetime) -> None:
    """Replace ``month``'s partition (if any) by the table ``built`` (indexed, holding exactly that
    month's rows); statistics for the planner are gathered at once."""
    table = month_table(month)
    if _exists(cursor, table):
        cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {table}")
        cursor.execute(f"DROP TABLE {table}")
    cursor.execute(f"ALTER TABLE {built} RENAME TO {table}")
    for old, new in ((f"{built}_unique", f"{table}_unique"), (f"{built}_hour", f"{table}_hour")):
        cursor.execute(f"ALTER INDEX {old} RENAME TO {new}")
    _attach(cursor, table, month)
    cursor.execute(f"ANALYZE {table}")
