"""Someone else setting the quotas Allot compiles. Pure.

Two authorities for one quota cannot both be right, and a sync that forces its values back every time
only fights. So a ClusterQueue or Cohort whose quota another *controller* owns is reported as a
conflict, with what to do, and left alone:

* Kueue's **DynamicQuotaOrchestration** (alpha in v0.20) writes ``status.effectiveQuotas`` from the
  capacity it discovers: what Kueue enforces is then that, not the ``nominalQuota`` Allot wrote;
* **another field manager** (Argo CD, Flux, Helm, an operator) owning ``spec.resourceGroups`` in the
  object's ``managedFields`` rewrites it on its own schedule.

A person's one-off edit (a ``kubectl`` manager: ``kubectl-edit``, ``kubectl-patch``, ``kubectl`` …) is not
a conflict but drift, reported or corrected by the cluster's drift policy as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .diff import MANAGER

QUOTA_KINDS = ("ClusterQueue", "Cohort")


@dataclass(frozen=True)
class QuotaConflict:
    kind: str
    name: str
    who: str
    evidence: str
    what_to_do: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, "", self.name)

    @property
    def message(self) -> str:
        return f"{self.who} sets this {self.kind}'s quota ({self.evidence}); left alone — {self.what_to_do}"


def _person(manager: str) -> bool:
    return manager.startswith("kubectl") or manager in ("k9s", "Mozilla", "dashboard")


def quota_conflicts(actual: Iterable[Mapping[str, Any]]) -> list[QuotaConflict]:
    """Each Allot-managed ClusterQueue or Cohort whose quota another controller sets."""
    found = []
    for obj in actual:
        kind = str(obj.get("kind"))
        if kind not in QUOTA_KINDS:
            continue
        name = str((obj.get("metadata") or {}).get("name"))
        effective = (obj.get("status") or {}).get("effectiveQuotas")
        if effective:
            found.append(
                QuotaConflict(
                    kind,
                    name,
                    "Kueue's DynamicQuotaOrchestration",
                    "status.effectiveQuotas from discovered capacity",
                    "turn Kueue's DynamicQuotaOrchestration feature gate off on this cluster so the guarantees "
                    "Allot compiles are what Kueue enforces, or take the cluster out of Allot's quota sync",
                )
            )
            continue
        owners = sorted(
            {
                str(entry.get("manager"))
                for entry in (obj.get("metadata") or {}).get("managedFields") or ()
                if entry.get("manager") != MANAGER
                and not _person(str(entry.get("manager") or ""))
                and "f:resourceGroups" in (((entry.get("fieldsV1") or {}).get("f:spec")) or {})
            }
        )
        if owners:
            found.append(
                QuotaConflict(
                    kind,
                    name,
                    ", ".join(owners),
                    "it owns spec.resourceGroups in managedFields",
                    f"stop {owners[0]} managing Allot's queues' quota (e.g. Argo CD ignoreDifferences on "
                    "spec.resourceGroups, or leave these objects out of its source), then sync again; Allot "
                    "will not force over it",
                )
            )
    return found
