"""Whose a Slurm account record is. Allot knows its accounts by the description it writes
(``<kind> <path>``), never by a name; an account's Description and Organization are one record in the
slurmdbd for every cluster it has associations on."""

from __future__ import annotations

import re
from dataclasses import replace

from .model import Problem, SlurmState

OURS = re.compile(r"^organisation [a-z0-9-]+$|^(department|team|project) [a-z0-9-]+(/[a-z0-9-]+)+$")


def without_foreign_accounts(
    desired: SlurmState, here: set[str], descriptions: dict[str, str]
) -> tuple[SlurmState, list[Problem]]:
    """Leave out the accounts this cluster lacks whose name the slurmdbd already holds with a description
    Allot did not write (a site's, on any cluster): an account's Description and Organization are one
    record for every cluster, so adding it here would rewrite the site's record — and the site's next
    sync would take the account for Allot's. Their subtrees, members and QOS go too, and each member's
    DefaultAccount is picked among the accounts left (a site's units imported into Allot are not given
    accounts on every other cluster, nor do its members' defaults move there)."""
    foreign = {
        a.name
        for a in desired.accounts
        if a.name not in here and a.name in descriptions and not OURS.match(descriptions[a.name])
    }
    if not foreign:
        return desired, []
    parents = {a.name: a.parent for a in desired.accounts}

    def dropped(name: str) -> bool:
        seen: set[str] = set()
        while name in parents and name not in seen:
            if name in foreign:
                return True
            seen.add(name)
            name = parents[name]
        return False

    out = {a.name for a in desired.accounts if dropped(a.name)}
    accounts = tuple(a for a in desired.accounts if a.name not in out)
    users = [u for u in desired.users if u.account not in out]
    first: dict[str, str] = {}
    for user in sorted(users, key=lambda u: (u.name, u.account)):
        first.setdefault(user.name, user.account)
    users = [u if u.default_account not in out else replace(u, default_account=first[u.name]) for u in users]
    used = {q for a in accounts for q in a.qos}
    lost = {q for a in desired.accounts if a.name in out for q in a.qos}
    qos = tuple(q for q in desired.qos if q.name in used or q.name not in lost)
    problems = [
        Problem(
            "account",
            name,
            f"the slurmdbd holds account {name} with the description {descriptions[name]!r}, which Allot did not "
            f"write: its Description and Organization are one record for every cluster, so it is not added on "
            f"{desired.cluster} (nor what is under it, nor its members there): rename the unit in Allot, or the "
            "site's account",
        )
        for name in sorted(foreign)
    ]
    return replace(desired, accounts=accounts, users=tuple(users), qos=qos), problems
