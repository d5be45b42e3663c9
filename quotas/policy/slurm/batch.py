"""Per-object sacctmgr commands folded into as few calls as possible, in dependency order: each write
costs slurmdbd a commit round trip, so the number of calls is a sync's cost (see .diff)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .diff import Command
from .model import SlurmAccount, SlurmUser
from .render import account_line, user_line


@dataclass(frozen=True, slots=True)
class Step:
    """One sacctmgr call covering ``commands``. ``load`` is a dump file's text when the call is a
    ``sacctmgr -i load``; ``argv`` then holds ``load`` and the file is written by the runner."""

    argv: tuple[str, ...]
    commands: tuple[Command, ...]
    load: str = ""


def _phase(command: Command) -> tuple[int, str, bool]:
    if command.kind == "qos" and command.action != "delete":
        return (0, command.scope, command.action != "add")  # preemptees, then guarantees; adds first
    if command.action == "add":
        return (1, "", False)  # new accounts and users: one load
    if command.action == "modify":
        return (2, "", False)  # after the load: a re-parent or a default account may name a new account
    if command.kind == "user":
        return (3, "", False)
    if command.kind == "account":
        return (4, command.scope, False)  # deepest first
    return (5, "", False)


def batch(commands: Sequence[Command], cluster: str) -> list[Step]:
    """Fold per-object commands into sacctmgr calls, in dependency order: QOS adds and modifies
    (preemptees, then guarantees), one ``load`` for new accounts and users, account modifies, user
    deletes per account, account deletes per depth (deepest first), QOS deletes. Commands that
    would set the same values in the same place share one call."""
    steps: list[Step] = []
    ordered = sorted(commands, key=_phase)  # stable: plan order inside a phase (accounts top-down)
    i = 0
    while i < len(ordered):
        phase = _phase(ordered[i])
        j = i
        while j < len(ordered) and _phase(ordered[j]) == phase:
            j += 1
        members = ordered[i:j]
        if phase[0] == 1:
            steps.append(_load(members, cluster))
        else:
            groups: dict[tuple[Any, ...], list[Command]] = {}
            for command in members:
                groups.setdefault((command.kind, command.action, command.scope, command.settings), []).append(command)
            steps += [_step(key, tuple(group), cluster) for key, group in groups.items()]
        i = j
    return steps


def _step(key: tuple[Any, ...], members: tuple[Command, ...], cluster: str) -> Step:
    if len(members) == 1:
        return Step(members[0].argv, members)
    kind, action, scope, settings = key
    names = ",".join(c.name.split("@")[0] for c in members)
    if kind == "qos":
        argv = ("add", "qos", names, *settings) if action == "add" else ()
        if action == "modify":
            argv = ("modify", "qos", "where", f"name={names}", "set", *settings)
        elif action == "delete":
            argv = ("delete", "qos", "where", f"name={names}")
    elif kind == "account":
        argv = ("modify", "account", "where", f"name={names}", f"cluster={cluster}", "set", *settings)
        if action == "delete":
            argv = ("delete", "account", "where", f"name={names}", f"cluster={cluster}")
    elif action == "modify" and scope.startswith("assoc:"):  # user associations of one account reset alike
        account = scope.split(":", 1)[1]
        argv = (
            "modify",
            "user",
            "where",
            f"name={names}",
            f"account={account}",
            f"cluster={cluster}",
            "set",
            *settings,
        )
    elif action == "modify":  # users getting the same default account
        argv = ("modify", "user", "where", f"name={names}", f"cluster={cluster}", "set", *settings)
    else:  # user deletes of one account
        argv = ("delete", "user", "where", f"name={names}", f"account={scope}", f"cluster={cluster}")
    return Step(argv, members)


def _load(adds: Sequence[Command], cluster: str) -> Step:
    """New accounts and user associations as one partial dump: ``Cluster`` with no settings (the
    cluster's own line is left as it is), then ``Parent`` blocks; existing parents are referenced."""
    if len(adds) == 1:
        return Step(adds[0].argv, (adds[0],))
    lines = [f"# Allot: new accounts and user associations for cluster {cluster}", f"Cluster - '{cluster}'"]
    blocks: dict[str, list[str]] = {}
    order: list[str] = []
    for command in adds:
        obj = command.obj
        if command.scope not in blocks:
            blocks[command.scope] = []
            order.append(command.scope)
        if isinstance(obj, SlurmAccount):
            blocks[command.scope].append(account_line(obj))
        elif isinstance(obj, SlurmUser):
            blocks[command.scope].append(user_line(obj))
    for parent in order:
        lines.append(f"Parent - '{parent}'")
        lines += blocks[parent]
    return Step(("load",), tuple(adds), "\n".join(lines) + "\n")
