"""Allot's organisation tree, quotas, contracts and audit trail.

Rows hold state only: every change goes through a function in ``quotas.services`` (validated by
the policy core, audited in the same transaction). Invariants a single row can carry are also
database ``CheckConstraint``s. One module per subject (Django finds the models through this package):
``catalogue`` (clusters, flavors, tiers, contracts), ``tree`` (units, quotas, budgets, reservations,
bindings, members), ``records`` (audit trail, sync runs, change requests).
"""

from .catalogue import (
    PROTECT,
    Cluster,
    ClusterKind,
    DriftPolicy,
    KueueSharing,
    PreemptionPolicy,
    ReclamationContract,
    ResourceFlavor,
    SubtreeCeilings,
    WithinQueuePolicy,
    WorkloadTier,
    slug_validator,
    validate_label_value,
    validate_node_labels,
)
from .records import (
    AppendOnlyQuerySet,
    AuditEvent,
    BeatRun,
    ChangeRequest,
    ChangeRequestStatus,
    QueueUsage,
    SyncMode,
    SyncObject,
    SyncOutcome,
    SyncRun,
    SyncStatus,
)
from .tree import (
    Budget,
    BudgetAction,
    BudgetPeriod,
    BudgetSpend,
    CapacityReservation,
    Membership,
    NamespaceBinding,
    OrgUnit,
    Quota,
)

__all__ = [
    "PROTECT",
    "AppendOnlyQuerySet",
    "AuditEvent",
    "BeatRun",
    "Budget",
    "BudgetAction",
    "BudgetPeriod",
    "BudgetSpend",
    "CapacityReservation",
    "ChangeRequest",
    "ChangeRequestStatus",
    "Cluster",
    "ClusterKind",
    "DriftPolicy",
    "KueueSharing",
    "Membership",
    "NamespaceBinding",
    "OrgUnit",
    "PreemptionPolicy",
    "QueueUsage",
    "Quota",
    "ReclamationContract",
    "ResourceFlavor",
    "SubtreeCeilings",
    "SyncMode",
    "SyncObject",
    "SyncOutcome",
    "SyncRun",
    "SyncStatus",
    "WithinQueuePolicy",
    "WorkloadTier",
    "slug_validator",
    "validate_label_value",
    "validate_node_labels",
]
