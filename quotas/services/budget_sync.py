"""What a sync does for GPU-hour budgets beyond compiling them (quotas.policy.budgets).

* Each sync run says which budgets it enforces ("held: budget spent …"), so the cluster's page and
  the history tell why a queue stopped.
* Slurm: a ``hold`` or ``deny`` budget's QOS carry ``Flags=NoDecay``, so their ``RawUsage`` is the
  budget's spend on Slurm's side; Allot zeroes it (``sacctmgr modify qos … set RawUsage=0``, the one
  value Slurm accepts) when a period starts or the budget is new, and records when
  (``BudgetSpend.reset_at``): the minutes it compiles count from there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from quotas.models import BudgetAction, BudgetSpend, Cluster, ClusterKind
from quotas.policy import budgets as bud
from quotas.policy.budget_effects import effects, subtree_ids
from quotas.policy.snapshot import OrgSnapshot

from .budget_spend import budget_usage_reset


def budget_notes(snapshot: OrgSnapshot, cluster: Cluster, at: datetime) -> list[str]:
    """One sentence per spent budget on this cluster's flavors and what the sync makes of it."""
    prefix = f"{cluster.name}/"
    notes = []
    for e in effects(snapshot.budgets, snapshot.budget_spend, snapshot.children, snapshot.tiers, at):
        if not e.flavor.startswith(prefix):
            continue
        path = snapshot.path(e.unit_id)
        until = f"until {e.resets:%Y-%m-%d} or a raise"
        if e.action is bud.BudgetAction.HOLD:
            if cluster.kind == ClusterKind.SLURM:
                how = "its jobs pend with QOSGrpGRESMinutes"
            elif e.queue_hold:
                how = "its LocalQueues stop (stopPolicy: Hold)"
            else:
                how = f"new {', '.join(e.tiers)} workloads are refused at admission (other tiers still run)"
            notes.append(f"held: budget spent — {path} on {e.flavor}: {how}, {until}")
        elif e.action is bud.BudgetAction.NO_BORROWING:
            notes.append(f"no borrowing: budget spent — {path} on {e.flavor} keeps its guarantee only, {until}")
        elif e.action is bud.BudgetAction.DENY:
            notes.append(f"denied: budget spent — {path} on {e.flavor}: new work is refused at submission, {until}")
    return notes


def slurm_resets(
    cluster: Cluster, snapshot: OrgSnapshot, target: Any, desired: Any, runner: Any, *, now: datetime | None = None
) -> list[str]:
    """Zero the Slurm usage of the QOS of every hold/deny budget on this cluster whose current period
    has not been reset yet, in one ``sacctmgr`` call; returns the run's notes. Only QOS the desired
    state holds for this cluster (its QOS prefix: a slurmdbd's other clusters keep theirs) are touched."""
    now = now or timezone.now()
    compiled = {q.name for q in desired.qos if q.grp_tres_mins}
    if not compiled:
        return []
    due = [
        spend
        for spend in BudgetSpend.objects.filter(
            budget__flavor__cluster=cluster,
            budget__action__in=[BudgetAction.HOLD, BudgetAction.DENY],
            period_start__lte=now,
            period_end__gt=now,
        ).only("budget_id", "budget__unit_id", "period_start", "reset_at")
        if spend.reset_at is None or spend.reset_at < spend.period_start
    ]
    names = set()
    for spend in due:
        for uid in subtree_ids(snapshot.children, spend.budget.unit_id):
            if uid in snapshot.units:
                account = target.accounts.get(uid) or snapshot.units[uid].slug
                names |= {target.guar(account), target.burst(account)} & compiled
    if not names:
        return []
    result = runner.write(("modify", "qos", "where", f"name={','.join(sorted(names))}", "set", "RawUsage=0"))
    if result.returncode != 0:
        return [f"budget usage not reset ({result.output.strip()[:200]}): the next sync retries"]
    budget_usage_reset(budget_ids=[s.budget_id for s in due], at=now)
    return [f"budget usage reset on {len(names)} QOS for the period starting {due[0].period_start:%Y-%m-%d}"]
