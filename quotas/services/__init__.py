"""Every state change of the quotas app: one function each, keyword-only, with ``actor`` and
``reason``; atomic; validated by the policy core; audited in the same transaction."""

from .bindings import membership_add, namespace_bind
from .catalogue import cluster_set, contract_set, flavor_set, reservation_delete, reservation_set, tier_set
from .quota import QuotaChange, quota_set, quota_set_bulk
from .units import org_unit_archive, org_unit_create, org_unit_move, org_unit_update

__all__ = [
    "QuotaChange",
    "cluster_set",
    "contract_set",
    "flavor_set",
    "membership_add",
    "namespace_bind",
    "org_unit_archive",
    "org_unit_create",
    "org_unit_move",
    "org_unit_update",
    "quota_set",
    "quota_set_bulk",
    "reservation_delete",
    "reservation_set",
    "tier_set",
]
