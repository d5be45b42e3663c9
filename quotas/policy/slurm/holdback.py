"""Writes held back from a Slurm sync: the QOS a sync must not write (a TRES the cluster lacks, another
cluster's QOS of the same name in a shared slurmdbd), each with its reason, and the account and user writes
that depend on them; the rest of the plan (``quotas.policy.slurm.diff``) goes ahead."""

from __future__ import annotations

from collections.abc import Sequence

from .diff import Command
from .model import Problem, SlurmState


def check_tres(desired: SlurmState, commands: Sequence[Command], tres: set[str]) -> tuple[list[Command], list[Problem]]:
    """Pitfall: a TRES must exist before a limit names it. Drop the QOS writes that name a TRES the
    cluster does not have (``sacctmgr show tres``), and the account and user writes that depend on
    those QOS, each with what to do; keep the rest."""
    missing = {q.name: sorted(t for t in q.grp_tres if t not in tres) for q in desired.qos if set(q.grp_tres) - tres}
    why = {
        name: f"{', '.join(names)} is not a TRES of cluster {desired.cluster}: add it to AccountingStorageTRES in "
        "slurm.conf (and the nodes' Gres), restart slurmctld, then sync again"
        for name, names in missing.items()
    }
    return hold_back(desired, commands, why, "which name a TRES the cluster does not have")


def hold_back(
    desired: SlurmState, commands: Sequence[Command], why: dict[str, str], because: str
) -> tuple[list[Command], list[Problem]]:
    """Drop the writes of the QOS in ``why`` (each reported with its reason) and the account and user
    writes that depend on them (an account must not be given a QOS that is not what Allot compiled:
    another cluster's, or the site's); keep the rest."""
    if not why:
        return list(commands), []
    parents = {a.name: a.parent for a in desired.accounts}
    unusable = {a.name for a in desired.accounts if set(a.qos) & set(why)}
    for name in parents:  # an account under a held-back one waits too (a load could not place it)
        node, depth = parents[name], 0
        while node in parents and depth < 64:
            if node in unusable:
                unusable.add(name)
                break
            node, depth = parents[node], depth + 1
    kept, problems = [], []
    for command in commands:
        if command.kind == "qos" and command.name in why and command.action != "delete":
            problems.append(Problem("qos", command.name, why[command.name]))
        elif command.kind == "account" and command.name in unusable and command.action != "delete":
            problems.append(Problem("account", command.name, f"waits for its QOS, {because}"))
        elif command.kind == "user" and command.action == "add" and command.scope in unusable:
            problems.append(Problem("user", command.name, f"waits for account {command.scope}"))
        elif (
            command.kind == "user"
            and command.action == "modify"
            and command.changes[0].path == "defaultaccount"
            and command.changes[0].desired in unusable
        ):
            problems.append(
                Problem(
                    "user", command.name, f"keeps its default account: {command.changes[0].desired} waits for its QOS"
                )
            )
        else:
            kept.append(command)
    return kept, problems
