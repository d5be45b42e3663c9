"""What an import of a Slurm tree cannot carry over: settings on accounts, user associations and the site's
own QOS that have no place in Allot's tree. Each is listed for the operator to accept before anything is
imported (``allot_import_slurm --accept-notes``), with what the sync will do about it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from .model import ACCOUNT_LIMITS, QOS_LIMITS, SlurmAccount, SlurmQos, SlurmUser, own_limits

LIMIT_NAMES = {n.lower(): n for n in ACCOUNT_LIMITS}
_QOS_LIMIT_NAMES = {n.lower(): n for n in QOS_LIMITS}


class _Losses(Protocol):
    losses: list[str]


def limits_lost(found: _Losses, accounts: Sequence[SlurmAccount], users: Sequence[SlurmUser]) -> None:
    """Limits set on an account or a user association itself (``show assoc`` repeats an account's
    Max* limits on everything under it) have no place in Allot's tree: each is a loss."""
    by_name = {a.name: a for a in accounts}

    def above(name: str) -> Mapping[str, str]:
        holder = by_name.get(name)
        return holder.limits if holder else {}

    for account in sorted(accounts, key=lambda a: a.name):
        for key, value in sorted(own_limits(account.limits, above(account.parent)).items()):
            found.losses.append(
                f"account {account.name}: {LIMIT_NAMES.get(key, key)}={value} is not carried over (Allot keeps "
                "GPU limits in each unit's QOS and sets no account limit; the sync reports it as drift, and "
                "removes it when the cluster's drift policy is 'correct'): set the unit's quota in Allot instead"
            )
        inherited = by_name[account.parent].priority if account.parent in by_name else ""
        if account.priority and account.priority != inherited:  # show assoc prints the parent's on its children
            found.losses.append(
                f"account {account.name}: Priority={account.priority} is not carried over (Allot sets no association "
                "priority: a job's priority comes from its tier's QOS and fair share)"
            )
    for user in sorted(users, key=lambda u: (u.account, u.name, u.partition)):
        if user.partition:
            found.losses.append(
                f"user {user.name} in {user.account}: the association for partition {user.partition} is not "
                "carried over (a member has one association per account, on every partition; the sync treats "
                "it as part of the member's: a change or removal of the member applies to it too)"
            )
        if user.priority and user.priority != (by_name[user.account].priority if user.account in by_name else ""):
            found.losses.append(
                f"user {user.name} in {user.account}: Priority={user.priority} is not carried over (Allot sets no "
                "association priority: a job's priority comes from its tier's QOS and fair share)"
            )
        for key, value in sorted(own_limits(user.limits, above(user.account)).items()):
            found.losses.append(
                f"user {user.name} in {user.account}: {LIMIT_NAMES.get(key, key)}={value} is not carried over "
                "(Allot sets no per-user limit; the sync reports it as drift)"
            )
        if user.fairshare != 1:
            found.losses.append(
                f"user {user.name} in {user.account}: Fairshare={user.fairshare} is not carried over (every "
                "member's association has Fairshare=1: its unit's weight is shared evenly; the sync resets it)"
            )
        holder = by_name.get(user.account)
        own_qos = bool(user.qos) and holder is not None and user.qos != holder.qos
        if own_qos:  # show assoc prints the account's on a user that sets none
            found.losses.append(
                f"user {user.name} in {user.account}: QOS={','.join(user.qos)} is not carried over (a member "
                "runs under its unit's QOS; the sync clears the user's own)"
            )
        if user.default_qos and holder is not None and user.default_qos != holder.default_qos:
            found.losses.append(
                f"user {user.name} in {user.account}: DefaultQOS={user.default_qos} is not carried over (a job "
                "without --qos runs under its unit's default; the sync clears the user's own)"
            )


def site_limits(qos: SlurmQos | None, accounts: Sequence[str]) -> str:
    """What a site QOS limits, which stops limiting the accounts' jobs once they run under Allot's QOS."""
    if qos is None:
        return ""
    said = [f"{_QOS_LIMIT_NAMES.get(k, k)}={v}" for k, v in sorted(qos.limits.items())]
    said += [f"MaxTRESPerJob={','.join(f'{t}={n}' for t, n in sorted(qos.max_tres.items()))}"] if qos.max_tres else []
    said += [f"MaxWall={qos.max_wall_min} min"] if qos.max_wall_min else []
    if not said:
        return ""
    return (
        f"; its {', '.join(said)} will no longer limit the jobs of {', '.join(accounts) or 'its accounts'} "
        "(Allot's QOS carry GPU limits and tiers' wall times only): keep them on a tier or ask the platform team"
    )
