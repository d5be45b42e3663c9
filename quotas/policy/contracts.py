"""Reclamation contracts: feasibility and consistency with workload tiers."""

from __future__ import annotations

from .durations import format_duration
from .snapshot import Contract, OrgSnapshot, Tier
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


def check_promises(snapshot: OrgSnapshot) -> list[Violation]:
    """A contract's promise holds for the worst-case borrower. An owner waits for its lent devices as
    long as the *borrower's* protection lasts (the borrower's contract is what the scheduler applies
    to the borrowed work: its minimum run window, grace, exit time, plus a scheduling pass), so a
    unit's ``reclaim_within`` on a flavor must be at least the longest protection of any unit that
    can borrow there: a unit with burst on the flavor outside the owner's own line (its ancestors
    and descendants use the owner's devices within their own guarantee, not as borrowers). An owner
    is a unit that lends on the flavor: its lendable (Kueue's ``lendingLimit``), or on a flavor whose
    scheduler lends every idle guaranteed device (Slurm's burst QOS run on any idle GPU), any
    guarantee. One violation per contract setting and flavor, naming the worst borrower."""
    from .quantity import Resource

    borrowers: dict[str, list[tuple[int, int, Contract]]] = {}
    owners: dict[str, list[int]] = {}
    for (uid, flavor, resource), quota in snapshot.quotas.items():
        if resource is not Resource.GPU or uid not in snapshot.units:
            continue
        contract = snapshot.effective_contract(uid)
        if quota.burst > 0:
            held = (
                worst_case_reclaim_s(contract, snapshot.scheduling_pass_s) if contract else snapshot.scheduling_pass_s
            )
            borrowers.setdefault(flavor, []).append((held, uid, contract) if contract else (held, uid, _NONE))
        known = snapshot.flavors.get(flavor)
        lends = quota.lendable > 0 or (quota.guarantee > 0 and known is not None and known.lends_idle_guarantees)
        if lends and contract is not None:
            owners.setdefault(flavor, []).append(uid)
    chains: dict[int, list[int]] = {}

    def chain(uid: int) -> list[int]:  # ancestors, computed once per unit
        if uid not in chains:
            chains[uid] = snapshot.ancestors(uid)
        return chains[uid]

    found: dict[tuple[int, str], Violation] = {}
    for flavor in sorted(owners):
        ranked = sorted(borrowers.get(flavor, ()), key=lambda b: (-b[0], snapshot.path(b[1])))
        for uid in sorted(owners[flavor], key=snapshot.path):
            contract = snapshot.effective_contract(uid)
            assert contract is not None
            line = {uid, *chain(uid)}
            root = (chain(uid) or [uid])[-1]
            worst = next(
                (
                    b
                    for b in ranked
                    if b[1] not in line and uid not in chain(b[1]) and (chain(b[1]) or [b[1]])[-1] == root
                ),
                None,
            )
            if worst is None or worst[0] <= contract.reclaim_within_s:
                continue
            setter = next(u for u in [uid, *chain(uid)] if snapshot.units[u].contract is not None)
            if (setter, flavor) in found:
                continue
            held, borrower, theirs = worst
            found[(setter, flavor)] = Violation(
                ViolationCode.CONTRACT_INFEASIBLE,
                f"{snapshot.path(setter)}: contract {contract.name} promises its devices back on {flavor} within "
                f"{format_duration(contract.reclaim_within_s)}, but borrower {snapshot.path(borrower)} may keep "
                f"them {format_duration(held)} (contract {theirs.name}: min run window "
                f"{format_duration(theirs.min_run_window_s)} + grace {format_duration(theirs.grace_period_s)} + "
                f"measured exit {format_duration(theirs.measured_exit_s)} + scheduling pass "
                f"{format_duration(snapshot.scheduling_pass_s)})",
                f"raise {contract.name}'s reclaim_within to at least {format_duration(held)}, shorten "
                f"{theirs.name}'s minimum run window or grace by {format_duration(held - contract.reclaim_within_s)}, "
                f"or set {snapshot.path(borrower)}'s burst on {flavor} to 0",
                unit=snapshot.path(setter),
                flavor=flavor,
                field="reclaim_within",
                limit=contract.reclaim_within_s,
                actual=held,
            )
    return [found[k] for k in sorted(found, key=lambda k: (snapshot.path(k[0]), k[1]))]


_NONE = Contract("(none)", 0, 0)
