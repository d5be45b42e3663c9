"""Every state change of the quotas app: one function each, keyword-only, with ``actor`` and
``reason``; atomic; validated by the policy core; audited in the same transaction."""

from .bindings import membership_add, membership_remove, namespace_bind, namespace_unbind
from .budgets import BudgetChange, budget_delete, budget_edit, budget_set, budget_set_bulk
from .catalogue import cluster_set, contract_set, flavor_set, reservation_delete, reservation_set, tier_set
from .change_requests import change_request_approve, change_request_reject, change_request_submit
from .fleets import fleet_set
from .quota import QuotaChange, quota_edit, quota_set, quota_set_bulk
from .units import org_unit_archive, org_unit_create, org_unit_move, org_unit_unarchive, org_unit_update

__all__ = [
    "BudgetChange",
    "QuotaChange",
    "budget_delete",
    "budget_edit",
    "budget_set",
    "budget_set_bulk",
    "change_request_approve",
    "change_request_reject",
    "change_request_submit",
    "cluster_set",
    "contract_set",
    "flavor_set",
    "fleet_set",
    "membership_add",
    "membership_remove",
    "namespace_bind",
    "namespace_unbind",
    "org_unit_archive",
    "org_unit_create",
    "org_unit_move",
    "org_unit_unarchive",
    "org_unit_update",
    "quota_edit",
    "quota_set",
    "quota_set_bulk",
    "reservation_delete",
    "reservation_set",
    "tier_set",
]
