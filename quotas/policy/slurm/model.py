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


@dataclass(frozen=True, slots=True)
class SlurmUser:
    name: str
    account: str
    default_account: str
    fairshare: int = 1


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
    max_wall_min: int | None = None
    flags: tuple[str, ...] = ()


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
