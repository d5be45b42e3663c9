"""Desired vs actual Slurm state → the ``sacctmgr -i`` commands that converge them, in order.

Two layers:

* :func:`plan_slurm` — one :class:`Command` per object (QOS, account, user association), with the
  field-level differences and the single-object ``sacctmgr`` arguments;
* :func:`.batch.batch` — the same commands folded into as few sacctmgr calls as possible (:class:`Step`):
  QOS and accounts that get the same settings share one ``add``/``modify``/``delete`` call (modifies
  set only what differs, so one new burst QOS becomes one call for every guarantee QOS), and all new
  accounts and user associations go in one ``sacctmgr load`` of a partial dump. Each write costs
  slurmdbd a commit round trip (about 0.35 s here), so the number of calls is the sync's cost.
  A step that fails is retried object by object, so every object gets its own outcome.

Order (NOTES.md §6): QOS (preemptees before preemptors), accounts top-down, user associations;
then deletions bottom-up (users, accounts children-first, QOS no longer referenced). Only objects
Allot manages are ever modified or deleted: accounts whose description Allot wrote (``<kind>
<path>``) and QOS whose description Allot wrote for *this* cluster (``allot@<cluster>: …``) — never
by name alone: a site's ``guar-rogue`` is the site's, and another cluster's QOS in the same slurmdbd
(QOS are shared by all its clusters) are that cluster's. A QOS any association of another cluster
still lists is never deleted. Anything else with one of our names is reported, never touched. QOS
written before descriptions named their cluster (``allot: …``) are adopted by the cluster that
wants them (their description is rewritten).
``show assoc`` prints *effective* QOS lists (inherited from the parent, pitfall P3), so desired lists
are compared after the same inheritance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..kueue.diff import FieldChange
from .model import Problem, SlurmAccount, SlurmQos, SlurmState, SlurmUser, clear_limits, own_limits
from .ownership import OURS, without_foreign_accounts
from .render import clear_tres, qos_settings

QOS_MARK = "allot@"
"""Every QOS description Allot writes starts with this and its cluster (translate.py): how a QOS is
known to be Allot's, and whose."""


LEGACY_MARK = "allot:"
"""What descriptions started with before they named their cluster."""


def qos_owner(qos: SlurmQos) -> str | None:
    """The cluster a QOS belongs to: its name from ``allot@<cluster>: …``; "" for one Allot wrote
    before descriptions named their cluster; None for the site's own."""
    if qos.description.startswith(QOS_MARK):
        return qos.description[len(QOS_MARK) :].partition(":")[0]
    return "" if qos.description.startswith(LEGACY_MARK) else None


def ours_qos(qos: SlurmQos, cluster: str | None = None) -> bool:
    """Allot's (any cluster's when ``cluster`` is None, else that cluster's or an unclaimed legacy one)."""
    owner = qos_owner(qos)
    return owner is not None and (cluster is None or owner in ("", cluster))


@dataclass(frozen=True, slots=True)
class Command:
    """One object's change. ``argv`` changes this object alone; ``settings`` are what a batched call
    sets (for a modify: only what differs); ``obj`` is the desired object for adds."""

    kind: str
    name: str
    action: str
    argv: tuple[str, ...]
    changes: tuple[FieldChange, ...] = ()
    settings: tuple[str, ...] = ()
    scope: str = ""
    """What must be equal besides ``settings`` to share a call: the parent for accounts, the account
    for users, the depth for account deletes, the QOS phase."""
    obj: SlurmAccount | SlurmUser | SlurmQos | None = None

    @property
    def summary(self) -> str:
        return "; ".join(f"{c.path} {_show(c.actual)} → {_show(c.desired)}" for c in self.changes)


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items())) or "(none)"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value) or "(none)"
    return str(value) if value not in ("", None) else "(none)"


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
    elsewhere: frozenset[str] = frozenset(),
) -> tuple[list[Command], list[Problem]]:
    """``descriptions``: actual account descriptions (``show account``), to tell ours from the site's;
    ``elsewhere``: the QOS that associations of the slurmdbd's other clusters list (never deleted).
    Returns the per-object commands in dependency order and the objects refused (not ours)."""
    cluster = desired.cluster
    desired, refusals = without_foreign_accounts(desired, {a.name for a in accounts}, descriptions)
    commands = _qos_commands(desired.qos, {q.name: q for q in qos}, refusals, cluster)
    actual_accounts = {a.name: a for a in accounts}
    desired_accounts = {a.name: a for a in desired.accounts}
    want_effective = effective_qos(desired.accounts)
    have_effective = {a.name: a.qos for a in accounts}
    for want in desired.accounts:
        have = actual_accounts.get(want.name)
        settings = _account_settings(want)
        if have is None:
            argv = ("add", "account", want.name, f"cluster={cluster}", f"parent={want.parent}", *settings)
            commands.append(Command("account", want.name, "add", argv, obj=want, scope=want.parent))
            continue
        if not OURS.match(descriptions.get(want.name, "")):
            refusals.append(Problem("account", want.name, "exists but was not created by Allot: left alone"))
            continue
        changes, changed = [], []
        if have.parent != want.parent:
            changes.append(FieldChange("parent", want.parent, have.parent))
            changed.append(f"parent={want.parent}")
        if have.fairshare != want.fairshare:
            changes.append(FieldChange("fairshare", want.fairshare, have.fairshare))
            changed.append(f"Fairshare={want.fairshare}")
        qos_differs = have_effective.get(want.name, ()) != want_effective[want.name]
        if qos_differs:
            changes.append(FieldChange("qos", want_effective[want.name], have_effective.get(want.name, ())))
        if want.qos and have.default_qos != want.default_qos:
            changes.append(FieldChange("defaultqos", want.default_qos, have.default_qos))
        if qos_differs or (want.qos and have.default_qos != want.default_qos):
            changed += [f"QOS={','.join(want.qos)}", f"DefaultQOS={want.default_qos or '-1'}"]
        limits = _set_here(have, actual_accounts)
        if limits:  # a limit Allot never sets (a GrpTRES, MaxJobs, …) changes what jobs may run
            changes.append(FieldChange("limits", {}, limits))
            changed += clear_limits(limits)
        if changes:
            argv = ("modify", "account", "where", f"name={want.name}", f"cluster={cluster}", "set", *changed)
            commands.append(Command("account", want.name, "modify", argv, tuple(changes), tuple(changed)))
    actual_users = {(u.name, u.account): u for u in users}
    for user in desired.users:
        have_user = actual_users.get((user.name, user.account))
        if have_user is not None:
            commands += _user_drift(user, have_user, actual_accounts, desired_accounts, cluster)
        if have_user is None:
            argv = (
                "add",
                "user",
                user.name,
                f"account={user.account}",
                f"cluster={cluster}",
                f"DefaultAccount={user.default_account}",
            )
            commands.append(Command("user", f"{user.name}@{user.account}", "add", argv, obj=user, scope=user.account))
    commands += _default_accounts(desired, accounts, users, descriptions)
    commands += _deletions(desired, accounts, users, qos, descriptions, cluster, elsewhere)
    return commands, refusals


def _user_drift(
    want: SlurmUser,
    have: SlurmUser,
    accounts: dict[str, SlurmAccount],
    desired: dict[str, SlurmAccount],
    cluster: str,
) -> list[Command]:
    """A user association's own Fairshare, limits, QOS list or DefaultQOS set by hand (sacctmgr modify
    user … set MaxJobs=…, QOS+=normal DefaultQOS=normal): drift, reset to what Allot writes (Fairshare as
    compiled, no limits of its own, its account's QOS and default). ``show assoc`` prints the account's
    QOS on a user that sets none, so only a list or default other than the account's as read is the
    user's own; it is cleared (``QOS= DefaultQOS=-1``), so the user inherits the account's again and
    follows its later changes (checked on the local stack)."""
    account = accounts.get(want.account)
    limits = own_limits(have.limits, account.limits if account else {})
    changes, changed = [], []
    if have.fairshare != want.fairshare:
        changes.append(FieldChange("fairshare", want.fairshare, have.fairshare))
        changed.append(f"Fairshare={want.fairshare}")
    target = desired.get(want.account)
    if account is not None and target is not None and target.qos and have.qos:
        if have.qos != account.qos:
            changes.append(FieldChange("qos", target.qos, have.qos))
        if have.default_qos != account.default_qos:
            changes.append(FieldChange("defaultqos", target.default_qos, have.default_qos))
        if have.qos != account.qos or have.default_qos != account.default_qos:
            changed += ["QOS=", "DefaultQOS=-1"]
    if limits:
        changes.append(FieldChange("limits", {}, limits))
        changed += clear_limits(limits)
    if not changes:
        return []
    argv = ("modify", "user", "where", f"name={want.name}", f"account={want.account}", f"cluster={cluster}", "set")
    name = f"{want.name}@{want.account}"
    return [Command("user", name, "modify", (*argv, *changed), tuple(changes), tuple(changed), f"assoc:{want.account}")]


def _set_here(account: SlurmAccount, accounts: dict[str, SlurmAccount]) -> dict[str, str]:
    """The limits set on ``account`` itself: ``show assoc`` prints a parent's Max* limits on every
    account under it too, and clearing the parent's clears those."""
    parent = accounts.get(account.parent)
    return own_limits(account.limits, parent.limits if parent else {})


def _default_accounts(
    desired: SlurmState, accounts: Sequence[SlurmAccount], users: Sequence[SlurmUser], descriptions: dict[str, str]
) -> list[Command]:
    """A user Slurm knows whose DefaultAccount is not the one Allot wants (e.g. it was an archived
    unit's account): set it — unless it is one of the site's own accounts, which stays the site's."""
    wanted = {u.name: u.default_account for u in desired.users}
    have = {u.name: u.default_account for u in users}
    site = {a.name for a in accounts if not OURS.match(descriptions.get(a.name, ""))}
    found = []
    for name in sorted(wanted):
        if name not in have or have[name] == wanted[name] or have[name] in site:
            continue  # an add sets it; or nothing to do; or the site's choice
        setting = f"DefaultAccount={wanted[name]}"
        argv = ("modify", "user", "where", f"name={name}", f"cluster={desired.cluster}", "set", setting)
        changes = (FieldChange("defaultaccount", wanted[name], have[name]),)
        found.append(Command("user", name, "modify", argv, changes, (setting,)))
    return found


def _qos_commands(
    desired: Sequence[SlurmQos], actual: dict[str, SlurmQos], refusals: list[Problem], cluster: str
) -> list[Command]:
    """Preemptees (burst, tier) first, then the guarantees whose ``Preempt=`` names them. A QOS with
    one of our names that Allot did not write, or wrote for another cluster, is refused (added to
    ``refusals``), not changed."""
    found = []
    for want in desired:
        phase = "1-guarantee" if want.preempt else "0-preemptee"
        have = actual.get(want.name)
        if have is None:
            settings = tuple(qos_settings(want, adding=True))
            argv = ("add", "qos", want.name, *settings)
            found.append(Command("qos", want.name, "add", argv, settings=settings, scope=phase, obj=want))
            continue
        owner = qos_owner(have)
        if owner not in (None, "", cluster):
            refusals.append(
                Problem(
                    "qos",
                    want.name,
                    f"belongs to Allot's cluster {owner} (QOS are shared by every cluster of a slurmdbd): left "
                    f"alone; give cluster {cluster} a QOS prefix (e.g. '{cluster}-') so its QOS get names of "
                    "their own, then sync again",
                )
            )
            continue
        if owner is None:
            refusals.append(
                Problem(
                    "qos",
                    want.name,
                    f"exists but was not created by Allot (its description {have.description!r} does not start "
                    f"with {QOS_MARK!r} and a cluster): left alone; rename or delete the site's QOS, or give this "
                    "cluster a QOS prefix, then sync again",
                )
            )
            continue
        pairs = [
            FieldChange(path, w, h)
            for path, w, h in (
                ("description", want.description, have.description),
                ("priority", want.priority, have.priority),
                ("preempt", want.preempt, have.preempt),
                ("preemptmode", want.preempt_mode, have.preempt_mode),
                ("gracetime", want.grace_time_s, have.grace_time_s),
                ("preemptexempttime", want.preempt_exempt_s, have.preempt_exempt_s),
                ("usagefactor", round(want.usage_factor, 6), round(have.usage_factor, 6)),
                ("grptres", dict(want.grp_tres), dict(have.grp_tres)),
                ("grptresmins", dict(want.grp_tres_mins), dict(have.grp_tres_mins)),
                ("maxwall", want.max_wall_min, have.max_wall_min),
                ("flags", tuple(sorted(f.lower() for f in want.flags)), tuple(sorted(f.lower() for f in have.flags))),
                ("maxtresperjob", dict(want.max_tres), dict(have.max_tres)),
                ("limits", dict(want.limits), dict(have.limits)),
            )
            if w != h
        ]
        if pairs:
            differs = {c.path for c in pairs}
            changed = tuple(
                clear_tres(want.grp_tres, have.grp_tres)
                if s.startswith("GrpTRES=")
                else clear_tres(want.grp_tres_mins, have.grp_tres_mins, "GrpTRESMins")
                if s.startswith("GrpTRESMins=")
                else clear_tres(want.max_tres, have.max_tres, "MaxTRESPerJob")
                if s.startswith("MaxTRESPerJob=")
                else s
                for s in qos_settings(want)
                if s.split("=", 1)[0].lower() in differs
            ) + (clear_limits(have.limits) if "limits" in differs else ())
            argv = ("modify", "qos", "where", f"name={want.name}", "set", *changed)
            found.append(Command("qos", want.name, "modify", argv, tuple(pairs), changed, phase, want))
    return sorted(found, key=lambda c: (c.scope, c.action != "add"))


def _account_settings(account: SlurmAccount) -> list[str]:
    settings = [
        f"Description={account.description}",
        f"Organization={account.organization}",
        f"Fairshare={account.fairshare}",
    ]
    if account.qos:
        settings += [f"QOS={','.join(account.qos)}", f"DefaultQOS={account.default_qos}"]
    return settings


def _deletions(
    desired: SlurmState,
    accounts: Sequence[SlurmAccount],
    users: Sequence[SlurmUser],
    qos: Sequence[SlurmQos],
    descriptions: dict[str, str],
    cluster: str,
    elsewhere: frozenset[str] = frozenset(),
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
            scope=u.account,
        )
        for u in sorted(users, key=lambda u: (u.account, u.name))
        if (u.name, u.account) not in wanted_users
        and (u.account in ours or u.account in wanted_accounts)
        and u.name != "root"
    ]
    parents = {a.name: a.parent for a in accounts}
    depth = {}
    for name in parents:
        node, d = name, 0
        while parents.get(node) in parents and d < 64:
            node, d = parents[node], d + 1
        depth[name] = d
    found += [
        Command(
            "account",
            name,
            "delete",
            ("delete", "account", "where", f"name={name}", f"cluster={cluster}"),
            scope=f"{999 - depth[name]:03d}",  # sorts deepest first
        )
        for name in sorted(ours, key=lambda n: (-depth[n], n))
    ]
    wanted_qos = {q.name for q in desired.qos}
    found += [
        Command("qos", q.name, "delete", ("delete", "qos", "where", f"name={q.name}"))
        for q in sorted(qos, key=lambda q: q.name)
        if ours_qos(q, cluster) and q.name not in wanted_qos and q.name not in elsewhere
    ]
    return found


def preview_slurm(current: SlurmState, proposed: SlurmState) -> list[Command]:
    """What a proposed change would do on a Slurm cluster: the plan from the state compiled now (read
    as ``show assoc`` would print it: effective QOS lists) to the state compiled with the change."""
    effective = effective_qos(current.accounts)
    accounts = [
        SlurmAccount(a.name, a.parent, a.fairshare, a.description, a.organization, effective[a.name], a.default_qos)
        for a in current.accounts
    ]
    descriptions = {a.name: a.description for a in current.accounts}
    commands, _ = plan_slurm(proposed, accounts, current.users, current.qos, descriptions=descriptions)
    return commands
