"""Reclamation contracts: feasibility and consistency with workload tiers."""

from __future__ import annotations

from .durations import format_duration
from .snapshot import Contract, Tier
from .violations import Violation, ViolationCode


def worst_case_reclaim_s(contract: Contract, scheduling_pass_s: int) -> int:
    """Longest time an owner may wait for borrowed capacity under this contract.

    A borrower that has just started cannot be preempted before ``min_run_window``; then it gets
    ``grace_period`` to exit, takes its measured checkpoint/exit time, and the owner's workload
    needs one scheduling pass to be admitted.
    """
    return contract.min_run_window_s + contract.grace_period_s + contract.measured_exit_s + scheduling_pass_s


def check_contract(contract: Contract, scheduling_pass_s: int) -> list[Violation]:
    """A contract is feasible when its worst-case reclaim time fits ``reclaim_within``."""
    problems = []
    worst = worst_case_reclaim_s(contract, scheduling_pass_s)
    if worst > contract.reclaim_within_s:
        problems.append(
            Violation(
                ViolationCode.CONTRACT_INFEASIBLE,
                f"contract {contract.name}: worst-case reclaim {format_duration(worst)} "
                f"(min run window {format_duration(contract.min_run_window_s)} + grace "
                f"{format_duration(contract.grace_period_s)} + measured exit "
                f"{format_duration(contract.measured_exit_s)} + scheduling pass "
                f"{format_duration(scheduling_pass_s)}) exceeds reclaim_within "
                f"{format_duration(contract.reclaim_within_s)}",
                f"raise reclaim_within to at least {format_duration(worst)}, or shorten the grace "
                f"period or minimum run window by {format_duration(worst - contract.reclaim_within_s)}",
                field="reclaim_within",
                limit=contract.reclaim_within_s,
                actual=worst,
            )
        )
    if contract.checkpoint_every_s is not None and contract.checkpoint_every_s <= 0:
        problems.append(
            Violation(
                ViolationCode.CONTRACT_INFEASIBLE,
                f"contract {contract.name}: checkpoint_every must be positive",
                "set a checkpoint cadence such as 15m, or leave it empty",
                field="checkpoint_every",
                limit=None,
                actual=contract.checkpoint_every_s,
            )
        )
    return problems


def check_tier_contract(tier: Tier, contract: Contract) -> list[Violation]:
    """A preemptible tier must be reclaimable under the contract its work runs with."""
    problems = []
    if tier.preemptible and tier.max_runtime_s is not None and contract.min_run_window_s > tier.max_runtime_s:
        problems.append(
            Violation(
                ViolationCode.TIER_INCONSISTENT,
                f"tier {tier.name}: its jobs end after {format_duration(tier.max_runtime_s)}, before "
                f"contract {contract.name}'s minimum run window of "
                f"{format_duration(contract.min_run_window_s)} allows preempting them",
                f"lower the contract's min_run_window to at most {format_duration(tier.max_runtime_s)}",
                field="min_run_window",
                limit=tier.max_runtime_s,
                actual=contract.min_run_window_s,
            )
        )
    if tier.opportunistic and not contract.checkpoint_every_s:
        problems.append(
            Violation(
                ViolationCode.TIER_INCONSISTENT,
                f"tier {tier.name} is opportunistic but contract {contract.name} sets no checkpoint cadence",
                "set checkpoint_every on the contract (e.g. 15m) so reclaimed work loses little",
                field="checkpoint_every",
            )
        )
    return problems
