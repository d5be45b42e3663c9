"""Slurm accounting objects as Allot manages them: desired and actual use the same shapes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SlurmAccount:
    name: str
    parent: str
    fairshare: int
    description: str = ""
    organization: str = ""
    qos: tuple[str, ...] = ()
    """Sorted: Slurm prints QOS lists alphabetically."""
    default_qos: str = ""
    limits: Mapping[str, str] = field(default_factory=dict)
    """Limits Allot never sets on an account (``ACCOUNT_LIMITS``), as read: any is drift."""
    priority: str = field(default="", compare=False)
    """The association's own ``Priority`` as read (Allot sets none; the import lists it as not carried)."""


@dataclass(frozen=True, slots=True)
class SlurmUser:
    name: str
    account: str
    default_account: str
    fairshare: int = 1
    limits: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Limits on the user association as read (``ACCOUNT_LIMITS``; those equal to its account's are
    the account's, shown on every association under it): Allot sets none, so any other is drift."""
    qos: tuple[str, ...] = field(default=(), compare=False)
    """The association's QOS as read (``show assoc`` prints the account's on a user that sets none);
    Allot sets none of its own, so a list other than its account's is drift (a job could run under it)."""
    default_qos: str = field(default="", compare=False)
    """Its DefaultQOS as read, likewise: job_submit.lua counts a job without --qos under the account's."""
    partition: str = field(default="", compare=False)
    """The association's partition (a site may give a user one association per partition); Allot's have none."""
    priority: str = field(default="", compare=False)
    """The association's own ``Priority`` as read (Allot sets none)."""


@dataclass(frozen=True, slots=True)
class SlurmQos:
    name: str
    description: str
    priority: int
    preempt: tuple[str, ...] = ()
    preempt_mode: str = "cluster"
    grace_time_s: int = 0
    preempt_exempt_s: int = 0
    usage_factor: float = 1.0
    grp_tres: Mapping[str, int] = field(default_factory=dict)
    grp_tres_mins: Mapping[str, int] = field(default_factory=dict)
    """``GrpTRESMins``: a GPU-hour budget's device-minutes (with ``Flags=NoDecay``), else empty."""
    max_wall_min: int | None = None
    flags: tuple[str, ...] = ()
    """As sacctmgr spells them (``DenyOnLimit``); compared without case."""
    max_tres: Mapping[str, int] = field(default_factory=dict)
    """``MaxTRESPerJob``: on tier QOS ``gres/gpu=0`` (a tier QOS carries no GPUs: they would count
    against no unit's limits)."""
    limits: Mapping[str, str] = field(default_factory=dict)
    """Limits Allot never sets on a QOS (``QOS_LIMITS`` but ``MaxTRES``), as read: any is drift."""


# Limits that change what jobs may run and that Allot never sets: on an Allot-owned account or QOS,
# any of them is drift (reported; removed when the drift policy is ``correct``). Names as sacctmgr's
# ``format=`` and ``set`` take them; those holding TRES are cleared one TRES at a time.
ACCOUNT_LIMITS = (
    "GrpTRES", "GrpJobs", "GrpSubmitJobs", "GrpTRESMins", "GrpTRESRunMins", "GrpWall",
    "MaxJobs", "MaxSubmitJobs", "MaxTRES", "MaxTRESPerNode", "MaxTRESMins", "MaxWall",
)  # fmt: skip
QOS_LIMITS = (
    "MaxTRESPerUser", "MaxTRESPerAccount", "MaxTRES", "MaxTRESPerNode", "MaxTRESMins", "MinTRES",
    "MaxJobsPerUser", "MaxSubmitJobsPerUser", "MaxJobsPerAccount", "MaxSubmitJobsPerAccount",
    "GrpJobs", "GrpSubmitJobs", "GrpTRESMins", "GrpTRESRunMins", "GrpWall",
)  # fmt: skip
TRES_LIMITS = frozenset(n.lower() for n in (*ACCOUNT_LIMITS, *QOS_LIMITS) if "TRES" in n)


def own_limits(limits: Mapping[str, str], inherited: Mapping[str, str]) -> dict[str, str]:
    """The limits set at this level: ``show assoc`` prints an account's Max* limits on every
    association under it too, so one equal to the level above's is that level's."""
    return {k: v for k, v in limits.items() if inherited.get(k) != v}


def clear_limits(limits: Mapping[str, str]) -> tuple[str, ...]:
    """``set`` arguments that remove ``limits`` (lowercase names as read): ``-1`` for a count or a
    time, ``<tres>=-1`` for each TRES of a TRES limit."""
    names = {n.lower(): n for n in (*ACCOUNT_LIMITS, *QOS_LIMITS)}
    found = []
    for key, value in sorted(limits.items()):
        name = names.get(key, key)
        if key in TRES_LIMITS:
            found.append(f"{name}=" + ",".join(f"{t.split('=', 1)[0]}=-1" for t in value.split(",") if "=" in t))
        else:
            found.append(f"{name}=-1")
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Problem:
    """An object Allot will not write, and why: reported per object, the rest of the sync goes on."""

    kind: str
    name: str
    message: str


@dataclass(frozen=True)
class SlurmState:
    cluster: str
    accounts: tuple[SlurmAccount, ...]
    users: tuple[SlurmUser, ...]
    qos: tuple[SlurmQos, ...]
    billing: Mapping[str, str] = field(default_factory=dict)
    """Flavor → the TRESBillingWeights its partition should carry (sites set it in slurm.conf)."""
    problems: tuple[Problem, ...] = ()
    """Units and members left out, e.g. names Slurm would store differently (uppercase, spaces)."""
