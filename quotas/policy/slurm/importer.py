"""An existing Slurm accounting tree → an Allot tree (the inverse of :mod:`.translate`).

* Accounts become units under their parent; ``root``'s children are organisations. The kind comes
  from an Allot description (``team acme/research/nlp``), otherwise from the depth (organisation,
  department, team, then project). ``Fairshare`` → weight.
* A ``guar-<account>`` QOS holds the account's *residual* guarantee, so a unit's guarantee is its
  QOS's ``GrpTRES`` plus its children's guarantees (summed bottom-up). ``burst-<account>`` →
  burst; its ``GraceTime`` / ``PreemptExemptTime`` → the unit's reclamation contract (grace period,
  minimum run window). A site's own QOS on an account (any other name) with a GPU ``GrpTRES`` is
  read as that account's guarantee, with a note: Allot will move it into ``guar-<account>``.
* ``gres/gpu:<type>`` maps to the cluster's flavor named ``<type>``; plain ``gres/gpu`` to the
  cluster's only flavor when it has exactly one.
* ``tier-<name>`` QOS that Allot wrote become tiers (``MaxWall`` → runtime limit); user associations
  → members.
* What cannot be carried over is a *loss*, listed for the operator to accept before anything is
  imported: limits on accounts and user associations (``GrpTRES``, ``MaxTRES``, ``MaxJobs``, …), the
  site's own QOS, a site QOS named like Allot's (``guar-astro``, ``tier-debug``), a site QOS whose
  GPU limit is read as a guarantee.
* Names Allot cannot use as unit names (Slurm allows ``_`` and ``.``) are reported and skipped,
  with everything under them.

The input is what :mod:`.parse` reads from ``sacctmgr -n -P show …`` or :func:`parse_dump` reads from
a ``sacctmgr dump`` file (which has no QOS definitions: give those separately).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..snapshot import UnitKind
from .import_losses import LIMIT_NAMES, limits_lost, site_limits
from .model import SlurmAccount, SlurmQos, SlurmUser
from .ownership import OURS
from .parse import PARENT_SHARE

_UNIT_SLUG = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_FIELD = re.compile(r"([A-Z]\w*)=('(?:[^']*)'|.*?)(?=:[A-Z]\w*=|$)")
"""``Key=value`` of a dump line: keys are capitalised, a value runs to the next ``:Key=`` (typed TRES
hold colons: ``GrpTRES=gres/gpu:a100=4``), or is quoted."""
_DUMP_LIMITS = {"maxtresperjob": "maxtres", "maxwalldurationperjob": "maxwall", "maxtresminsperjob": "maxtresmins"}
"""Dump names of limits → the names ``show assoc`` uses."""
_KINDS = (UnitKind.ORGANISATION, UnitKind.DEPARTMENT, UnitKind.TEAM, UnitKind.PROJECT)


@dataclass
class SlurmImportedUnit:
    name: str
    parent: str | None
    kind: UnitKind
    weight: int
    ours: bool
    """Its description is Allot's: the sync will manage it. Otherwise it stays the site's."""
    guarantee: dict[str, int] = field(default_factory=dict)
    """flavor → GPUs, the residual from the account's own QOS (children are added by :func:`read_slurm`)."""
    burst: dict[str, int] = field(default_factory=dict)
    contract: tuple[int, int] | None = None
    """(grace period s, minimum run window s) from the burst QOS."""
    members: list[str] = field(default_factory=list)


@dataclass
class SlurmImport:
    units: dict[str, SlurmImportedUnit] = field(default_factory=dict)
    tiers: dict[str, tuple[int, bool, int, str]] = field(default_factory=dict)
    """Tier name → (QOS priority, preemptible, runtime limit s, display name)."""
    notes: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    """Settings the import cannot carry over, or carries with another meaning: each must be accepted
    by the operator before anything is imported (``allot_import_slurm --accept-notes``)."""

    def top_down(self) -> list[SlurmImportedUnit]:
        children: dict[str | None, list[SlurmImportedUnit]] = {}
        for unit in self.units.values():
            children.setdefault(unit.parent, []).append(unit)
        order: list[SlurmImportedUnit] = []
        pending = sorted(children.get(None, []), key=lambda u: u.name)
        while pending:
            unit = pending.pop(0)
            order.append(unit)
            pending += sorted(children.get(unit.name, []), key=lambda u: u.name)
        return order

    def path(self, name: str) -> str:
        unit = self.units[name]
        return name if unit.parent is None else f"{self.path(unit.parent)}/{name}"


def parse_dump(text: str) -> tuple[str, list[SlurmAccount], list[SlurmUser]]:
    """A ``sacctmgr dump`` file → (cluster, accounts with their descriptions, user associations)."""
    cluster, parent = "", "root"
    accounts: list[SlurmAccount] = []
    users: list[SlurmUser] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head, _, rest = line.partition(":")
        kind, _, name = head.partition(" - ")
        name = name.strip().strip("'").lower()
        values = {_DUMP_LIMITS.get(k.lower(), k.lower()): v.strip("'") for k, v in _FIELD.findall(rest)}
        kind = kind.strip()
        if kind == "Cluster":
            cluster = name
        elif kind == "Parent":
            parent = name
        elif kind == "Account":
            share = values.get("fairshare", "1")
            accounts.append(
                SlurmAccount(
                    name,
                    parent,
                    1 if share in ("", PARENT_SHARE) or not share.isdigit() else int(share),
                    values.get("description", "").lower(),
                    values.get("organization", "").lower(),
                    tuple(sorted(q for q in values.get("qos", "").lower().split(",") if q)),
                    values.get("defaultqos", "").lower(),
                    {k: v.lower() for k, v in values.items() if k in LIMIT_NAMES},
                    priority=values.get("priority", ""),
                )
            )
        elif kind == "User":
            limits = {k: v.lower() for k, v in values.items() if k in LIMIT_NAMES}
            share = values.get("fairshare", "1")
            users.append(
                SlurmUser(
                    name,
                    parent,
                    values.get("defaultaccount", "").lower(),
                    1 if share in ("", PARENT_SHARE) or not share.isdigit() else int(share),
                    limits,
                    tuple(sorted(q for q in values.get("qos", "").lower().split(",") if q)),
                    values.get("defaultqos", "").lower(),
                    partition=values.get("partition", "").lower(),
                    priority=values.get("priority", ""),
                )
            )
        else:
            raise ValueError(f"line {number}: {kind!r} is not a dump line (Cluster, Parent, Account or User)")
    if not cluster:
        raise ValueError("no \"Cluster - 'name'\" line: is this a sacctmgr dump file?")
    return cluster, accounts, users


def read_slurm(
    accounts: Sequence[SlurmAccount],
    users: Sequence[SlurmUser],
    qos: Sequence[SlurmQos],
    *,
    flavors: Sequence[str],
    descriptions: Mapping[str, str] | None = None,
    split_from: Mapping[str, int] | None = None,
) -> SlurmImport:
    """``flavors``: the names of the cluster's flavors (= GPU types). ``descriptions`` when the
    accounts come from ``show assoc`` (which has none). ``split_from``: flavor → physical devices
    when the cluster compiles with strict subtree ceilings, whose burst QOS hold each unit's share of
    its parent's burst: a unit's burst is then read back as its subtree's burst QOS added up."""
    found = SlurmImport()
    by_qos = {q.name: q for q in qos}
    parents = {a.name: a.parent for a in accounts}
    limits_lost(found, accounts, users)
    accounts = _set_here(accounts)
    skipped: set[str] = set()
    for account in accounts:
        if not _UNIT_SLUG.match(account.name):
            skipped.add(account.name)
            found.notes.append(
                f"account {account.name}: not usable as a unit name (lowercase letters, digits and '-'); "
                "skipped with everything under it"
            )

    def under_skipped(name: str) -> bool:
        seen = 0
        while name in parents and seen < 64:
            if name in skipped:
                return True
            name, seen = parents[name], seen + 1
        return False

    def depth(name: str) -> int:
        d = 0
        while parents.get(name) in parents and d < 64:
            name, d = parents[name], d + 1
        return d

    read_as_guarantee: set[str] = set()
    for account in sorted(accounts, key=lambda a: (depth(a.name), a.name)):
        if under_skipped(account.name):
            continue
        description = (descriptions or {}).get(account.name, account.description)
        ours = bool(OURS.match(description))
        kind = UnitKind(description.split(" ", 1)[0]) if ours else _KINDS[min(depth(account.name), 3)]
        unit = SlurmImportedUnit(
            account.name,
            account.parent if account.parent in parents else None,
            kind,
            account.fairshare,
            ours,
        )
        site_guarantee = _limits(found, unit, account, by_qos, flavors)
        if site_guarantee:
            read_as_guarantee.add(site_guarantee)
        found.units[account.name] = unit
        if not ours:
            found.notes.append(
                f"account {account.name}: its description is the site's, so the sync will leave it alone; hand "
                f"it to Allot with: sacctmgr -i modify account where name={account.name} set "
                f"Description='{kind.value} {found.path(account.name)}'"
            )
    for user in users:  # a user with one association per partition is one member
        if user.account in found.units and user.name != "root" and user.name not in found.units[user.account].members:
            found.units[user.account].members.append(user.name)
    for unit in reversed(found.top_down()):  # children's guarantees add up into their parent's
        if unit.parent is not None:
            for flavor, gpus in unit.guarantee.items():
                parent = found.units[unit.parent].guarantee
                parent[flavor] = parent.get(flavor, 0) + gpus
    if split_from is not None:
        _unsplit_bursts(found, split_from)
    used = {name for a in accounts if a.name in found.units for name in a.qos}
    for name in sorted(used - read_as_guarantee - {"normal"}):
        site = by_qos.get(name)
        if not name.startswith(("guar-", "burst-", "tier-")):
            found.losses.append(
                f"QOS {name}: the site's own, not imported; Allot gives each unit guar-<account> and "
                "burst-<account> QOS (set guarantee and burst per unit) and keeps QOS it did not create"
                + site_limits(site, sorted(a.name for a in accounts if name in a.qos and a.name in found.units))
            )
        elif site is not None and not _allots(site):
            found.losses.append(
                f"QOS {name}: named like Allot's, but its description {site.description!r} is the site's: "
                + (
                    "its GPU limit is imported as the unit's, and the sync will not write over the site's QOS "
                    "(the account waits for it): rename or delete the site's QOS, or give the cluster a QOS "
                    "prefix, before the first sync"
                    if not name.startswith("tier-")
                    else "not imported as a tier"
                )
            )
    for q in qos:
        if q.name.startswith("tier-") and q.max_wall_min and not _allots(q):
            if q.name in used:
                continue  # reported above
            found.losses.append(f"QOS {q.name}: named like a tier but the site's own; not imported as a tier")
        elif q.name.startswith("tier-") and q.max_wall_min:
            text = q.description.partition(": ")[2] if q.description.startswith(("allot@", "allot:")) else q.description
            label = text.removeprefix(f"tier {q.name[5:]}").strip()
            found.tiers[q.name[5:].upper()] = (q.priority, q.preempt_mode == "requeue", q.max_wall_min * 60, label)
    return found


def _allots(qos: SlurmQos) -> bool:
    return qos.description.startswith(("allot@", "allot:"))


def _unsplit_bursts(found: SlurmImport, physical: Mapping[str, int]) -> None:
    """The inverse of strict compiling (``translate._split_bursts``): there, a unit whose ceiling is
    below the flavor's devices gets a burst allowance of which its children's subtrees take their
    part, and its own burst QOS holds the rest, so its burst is what its subtree's burst QOS add up
    to. A unit whose ceiling is the whole flavor keeps its own burst QOS as its burst. Which of the
    two a unit was is read from the sum: guarantee + subtree < devices exactly when it was bounded."""
    subtree: dict[str, dict[str, int]] = {}
    for unit in reversed(found.top_down()):
        total = dict(unit.burst)
        for child in found.units.values():
            if child.parent == unit.name:
                for flavor, gpus in subtree.get(child.name, {}).items():
                    total[flavor] = total.get(flavor, 0) + gpus
        subtree[unit.name] = total
        for flavor, gpus in total.items():
            devices = physical.get(flavor)
            if devices is not None and unit.guarantee.get(flavor, 0) + gpus < devices and gpus > 0:
                unit.burst[flavor] = gpus


def _set_here(accounts: Sequence[SlurmAccount]) -> list[SlurmAccount]:
    """The QOS set at each level. ``show assoc`` prints an account's *effective* list: one that sets
    none shows its parent's (pitfall P3), and reading that as its own counts the parent's guarantee
    twice. A list equal to the parent's is the parent's."""
    printed = {a.name: a.qos for a in accounts}
    return [
        replace(a, qos=(), default_qos="") if a.parent in printed and a.qos == printed[a.parent] else a
        for a in accounts
    ]


def _limits(
    found: SlurmImport,
    unit: SlurmImportedUnit,
    account: SlurmAccount,
    by_qos: Mapping[str, SlurmQos],
    flavors: Sequence[str],
) -> str | None:
    """Fill in the unit's guarantee, burst and contract; returns the name of a site QOS whose GPU
    limit was read as the guarantee, if one was."""
    guar, burst = by_qos.get(f"guar-{account.name}"), by_qos.get(f"burst-{account.name}")
    site_guarantee = None
    if guar is not None:
        unit.guarantee = _gpus(found, guar, flavors)
    else:
        for name in account.qos:
            site = by_qos.get(name)
            if site is not None and not name.startswith(("guar-", "burst-", "tier-")) and name != "normal":
                gpus = _gpus(found, site, flavors)
                if gpus and not unit.guarantee:
                    unit.guarantee, site_guarantee = gpus, name
                    found.losses.append(
                        f"account {account.name}: the GPU limit of the site's QOS {name} is imported as its "
                        f"guarantee; Allot will keep it in guar-{account.name}"
                    )
    if burst is not None:
        unit.burst = _gpus(found, burst, flavors)
        unit.contract = (burst.grace_time_s, burst.preempt_exempt_s)
    return site_guarantee


def _gpus(found: SlurmImport, qos: SlurmQos, flavors: Sequence[str]) -> dict[str, int]:
    gpus: dict[str, int] = {}
    typed = any(t.startswith("gres/gpu:") for t in qos.grp_tres)
    for tres, count in qos.grp_tres.items():
        if not tres.startswith("gres/gpu") or (tres == "gres/gpu" and typed):
            continue  # beside typed limits, the untyped one is their total (Allot's backstop), not more GPUs
        kind = tres.partition(":")[2]
        if not kind and len(flavors) == 1:
            kind = flavors[0]
        if kind in flavors:
            gpus[kind] = gpus.get(kind, 0) + count
        else:
            found.notes.append(
                f"QOS {qos.name}: {tres}={count} has no flavor on the cluster "
                f"({'a typed gres/gpu:<type> is needed with several flavors' if not kind else f'create flavor {kind}'})"
                "; not imported"
            )
    return gpus
