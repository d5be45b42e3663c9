"""On PostgreSQL, accounting_usagehour becomes a table partitioned by month (RANGE on hour).

A month's rollup of a 1,000-team fleet is three million rows. Rebuilt in place, every row paid for
three index insertions and an ON CONFLICT probe (a month took 23 s); rebuilt as a new partition — rows
first, indexes built once after, then swapped in with DETACH/ATTACH — the same month takes a third of
that, old months can be dropped whole, and queries over a window only read its months. A DEFAULT
partition takes rows of months not partitioned yet (written outside a rollup); the rollup moves them
into their month's partition when it creates it (``accounting.services.rollup``).

PostgreSQL 15 has no identity columns on partitioned tables: ``id`` takes its values from a sequence
owned by the column. A partitioned table's unique constraints must include the partition key: the
primary key is dropped (``id`` stays unique by its sequence; Django still uses it as the pk), the
unique (unit, flavor, hour) stays. Other databases (SQLite) keep the plain table. The model's state
does not change; the earlier code runs unchanged on the partitioned table, so going back is a no-op.
"""

from datetime import UTC, datetime

from django.db import migrations

COLUMNS = (
    "id, hour, minutes, guarantee, allocated, within, borrowed, lent, pending, active, productive, "
    "productive_estimated, minutes_full, minutes_queued, flavor_id, unit_id"
)


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run("ALTER TABLE accounting_usagehour RENAME TO accounting_usagehour_unpartitioned")
    run("ALTER TABLE accounting_usagehour_unpartitioned RENAME CONSTRAINT usage_hour_unique TO usage_hour_unique_old")
    run("ALTER INDEX usage_hour_idx RENAME TO usage_hour_idx_old")
    run("CREATE SEQUENCE accounting_usagehour_id_seq_p")
    run(
        """
        CREATE TABLE accounting_usagehour (
          id bigint NOT NULL DEFAULT nextval('accounting_usagehour_id_seq_p'),
          hour timestamp with time zone NOT NULL,
          minutes smallint NOT NULL CONSTRAINT accounting_usagehour_minutes_check CHECK (minutes >= 0),
          guarantee double precision NOT NULL,
          allocated double precision NOT NULL,
          within double precision NOT NULL,
          borrowed double precision NOT NULL,
          lent double precision NOT NULL,
          pending double precision NOT NULL,
          active double precision NULL,
          productive double precision NULL,
          productive_estimated boolean NOT NULL,
          minutes_full smallint NOT NULL CONSTRAINT accounting_usagehour_minutes_full_check CHECK (minutes_full >= 0),
          minutes_queued smallint NOT NULL
            CONSTRAINT accounting_usagehour_minutes_queued_check CHECK (minutes_queued >= 0),
          flavor_id bigint NOT NULL,
          unit_id bigint NOT NULL,
          CONSTRAINT usage_hour_unique UNIQUE (unit_id, flavor_id, hour)
        ) PARTITION BY RANGE (hour)
        """
    )
    run("ALTER SEQUENCE accounting_usagehour_id_seq_p OWNED BY accounting_usagehour.id")
    run("CREATE INDEX usage_hour_idx ON accounting_usagehour (hour)")
    run("CREATE TABLE accounting_usagehour_default PARTITION OF accounting_usagehour DEFAULT")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT MIN(hour), MAX(hour) FROM accounting_usagehour_unpartitioned")
        first, last = cursor.fetchone()
        if first is not None:  # a partition per month that has rows (the rollup adds the others)
            first = first.astimezone(UTC)
            month = datetime(first.year, first.month, 1, tzinfo=UTC)
            while month <= last:
                following = datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)
                cursor.execute(
                    f"CREATE TABLE accounting_usagehour_p{month:%Y%m} PARTITION OF accounting_usagehour "
                    "FOR VALUES FROM (%s) TO (%s)",
                    [month, following],
                )
                month = following
        cursor.execute(
            f"INSERT INTO accounting_usagehour ({COLUMNS}) SELECT {COLUMNS} FROM accounting_usagehour_unpartitioned"
        )
        cursor.execute(
            "SELECT setval('accounting_usagehour_id_seq_p', "
            "(SELECT COALESCE(MAX(id), 0) + 1 FROM accounting_usagehour_unpartitioned), false)"
        )
    run("DROP TABLE accounting_usagehour_unpartitioned")


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("accounting", "0008_review_files"),
    ]

    operations = [
        migrations.RunPython(partition, migrations.RunPython.noop, elidable=False),
    ]
