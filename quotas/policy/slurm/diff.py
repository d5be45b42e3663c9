"""Desired vs actual Slurm state → the ``sacctmgr -i`` commands that converge them, in order.

Order (NOTES.md §6): QOS (preemptees before preemptors), accounts top-down, user associations;
then deletions bottom-up (users, accounts children-first, QOS no longer referenced). Only objects
Allot manages are ever modified or deleted: accounts whose description Allot wrote (``<kind>
<path>``) and QOS named ``guar-*`` / ``burst-*``. Anything else with one of our names is reported,
never touched. ``show assoc`` prints *effective* QOS lists (inherited from the parent, pitfall P3),
so desired lists are compared after the same inheritance.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .model import SlurmAccount, SlurmQos, SlurmState, SlurmUser
from .render import qos_settings

OURS = re.compile(r"^organisation [a-z0-9-]+$|^(department|team|project) [a-z0-9-]+(/[a-z0-9-]+)+$")
OUR_QOS = re.compile(r"^(guar|burst)-")


@dataclass(frozen=True, slots=True)
class Command:
    kind: str
    name: str
    action: str
    argv: tuple[str, ...]
    changes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: str
    name: str
    message: str


def effective_qos(
    accounts: Sequence[SlurmAccount], root_qos: tuple[str, ...] = ("normal",)
) -> dict[str, tuple[str, ...]]:
    """QOS lists as ``show assoc`` prints them: an account without its own inherits its parent's."""
    parents = {a.name: a.parent for a in accounts}
    own = {a.name: a.qos for a in accounts}
    found: dict[str, tuple[str, ...]] = {}

    def of(name: str) -> tuple[str, ...]:
        if name not in found:
            found[name] = own.get(name) or (of(parents[name]) if parents.get(name) in parents else root_qos)
        return found[name]

    for account in accounts:
        of(account.name)
    return found


def plan_slurm(
    desired: SlurmState,
    accounts: Sequence[SlurmAccount],
    users: Sequence[SlurmUser],
    qos: Sequence[SlurmQos],
    *,
    descriptions: dict[str, str],
) -> tuple[list[Command], list[Refusal]]:
    """``descriptions``: actual account descriptions (``show account``), to tell ours from the site's."""
    cluster = desired.cluster
    commands: list[Command] = []
    refusals: list[Refusal] = []
    actual_qos = {q.name: q for q in qos}
    for want in desired.qos:
        have = actual_qos.get(want.name)
        if have is None:
            commands.append(Command("qos", want.name, "add", ("add", "qos", want.name, *qos_settings(want))))
        else:
            changes = _qos_changes(want, have)
            if changes:
                commands.append(
                    Command(
                        "qos",
                        want.name,
                        "modify",
                        ("modify", "qos", "where", f"name={want.name}", "set", *qos_settings(want)),
                        tuple(changes),
                    )
                )
    actual_accounts = {a.name: a for a in accounts}
    want_effective = effective_qos(desired.accounts)
    have_effective = {a.name: a.qos for a in accounts}
    for want_account in desired.accounts:
        have_account = actual_accounts.get(want_account.name)
        settings = _account_settings(want_account)
        if have_account is None:
            commands.append(
                Command(
                    "account",
                    want_account.name,
                    "add",
                    (
                        "add",
                        "account",
                        want_account.name,
                        f"cluster={cluster}",
                        f"parent={want_account.parent}",
                        *settings,
                    ),
                )
            )
            continue
        if not OURS.match(descriptions.get(want_account.name, "")):
            refusals.append(Refusal("account", want_account.name, "exists but was not created by Allot: left alone"))
            continue
        changes = []
        if have_account.parent != want_account.parent:
            changes.append(f"parent {have_account.parent} → {want_account.parent}")
        if have_account.fairshare != want_account.fairshare:
            changes.append(f"fairshare {have_account.fairshare} → {want_account.fairshare}")
        if have_effective.get(want_account.name, ()) != want_effective[want_account.name]:
            changes.append(
                f"qos {','.join(have_effective.get(want_account.name, ()))} → "
                f"{','.join(want_effective[want_account.name])}"
            )
        if want_account.qos and have_account.default_qos != want_account.default_qos:
            changes.append(f"defaultqos {have_account.default_qos} → {want_account.default_qos}")
        if changes:
            commands.append(
                Command(
                    "account",
                    want_account.name,
                    "modify",
                    (
                        "modify",
                        "account",
                        "where",
                        f"name={want_account.name}",
                        f"cluster={cluster}",
                        "set",
                        f"parent={want_account.parent}",
                        *settings,
                    ),
                    tuple(changes),
                )
            )
    actual_users = {(u.name, u.account): u for u in users}
    for want_user in desired.users:
        if (want_user.name, want_user.account) not in actual_users:
            commands.append(
                Command(
                    "user",
                    f"{want_user.name}@{want_user.account}",
                    "add",
                    (
                        "add",
                        "user",
                        want_user.name,
                        f"account={want_user.account}",
                        f"cluster={cluster}",
                        f"DefaultAccount={want_user.default_account}",
                    ),
                )
            )
    commands += _deletions(desired, accounts, users, qos, descriptions, cluster)
    return commands, refusals


def _account_settings(account: SlurmAccount) -> list[str]:
    settings = [
        f"Description={account.description}",
        f"Organization={account.organization}",
        f"Fairshare={account.fairshare}",
    ]
    if account.qos:
        settings += [f"QOS={','.join(account.qos)}", f"DefaultQOS={account.default_qos}"]
    return settings


def _qos_changes(want: SlurmQos, have: SlurmQos) -> list[str]:
    pairs = [
        ("description", want.description, have.description),
        ("priority", want.priority, have.priority),
        ("preempt", want.preempt, have.preempt),
        ("preemptmode", want.preempt_mode, have.preempt_mode),
        ("gracetime", want.grace_time_s, have.grace_time_s),
        ("preemptexempttime", want.preempt_exempt_s, have.preempt_exempt_s),
        ("usagefactor", round(want.usage_factor, 6), round(have.usage_factor, 6)),
        ("grptres", dict(want.grp_tres), dict(have.grp_tres)),
    ]
    return [f"{name} {h} → {w}" for name, w, h in pairs if w != h]


def _deletions(
    desired: SlurmState,
    accounts: Sequence[SlurmAccount],
    users: Sequence[SlurmUser],
    qos: Sequence[SlurmQos],
    descriptions: dict[str, str],
    cluster: str,
) -> list[Command]:
    wanted_accounts = {a.name for a in desired.accounts}
    ours = {a.name for a in accounts if OURS.match(descriptions.get(a.name, "")) and a.name not in wanted_accounts}
    wanted_users = {(u.name, u.account) for u in desired.users}
    found = [
        Command(
            "user",
            f"{u.name}@{u.account}",
            "delete",
            ("delete", "user", "where", f"name={u.name}", f"account={u.account}", f"cluster={cluster}"),
        )
        for u in sorted(users, key=lambda u: (u.account, u.name))
        if (u.name, u.account) not in wanted_users
        and (u.account in ours or u.account in wanted_accounts)
        and u.name != "root"
    ]
    depth = {a.name: 0 for a in accounts}
    parents = {a.name: a.parent for a in accounts}
    for name in depth:
        node, d = name, 0
        while parents.get(node) in parents and d < 64:
            node, d = parents[node], d + 1
        depth[name] = d
    found += [
        Command("account", name, "delete", ("delete", "account", "where", f"name={name}", f"cluster={cluster}"))
        for name in sorted(ours, key=lambda n: (-depth[n], n))
    ]
    wanted_qos = {q.name for q in desired.qos}
    found += [
        Command("qos", q.name, "delete", ("delete", "qos", q.name))
        for q in sorted(qos, key=lambda q: q.name)
        if OUR_QOS.match(q.name) and q.name not in wanted_qos
    ]
    return found
