"""Row locks in one fixed order, so concurrent services can never deadlock each other.

Order: org units by id, then flavors by id. PostgreSQL takes ``FOR UPDATE`` locks in the order of an
``ORDER BY`` query. On SQLite (the demo) writes are serialised by the database lock instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from quotas.models import OrgUnit, ResourceFlavor


def lock_units(ids: Iterable[int]) -> list[int]:
    return list(OrgUnit.objects.select_for_update().filter(id__in=set(ids)).order_by("id").values_list("id", flat=True))


def lock_flavors(ids: Iterable[int]) -> list[int]:
    return list(
        ResourceFlavor.objects.select_for_update().filter(id__in=set(ids)).order_by("id").values_list("id", flat=True)
    )
