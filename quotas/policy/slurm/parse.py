"""Read ``sacctmgr -n -P`` / ``-P`` output into the model, normalised for comparison (NOTES.md §6):
names lowercased, TRES strings as maps, QOS lists as sorted tuples, times as seconds."""

from __future__ import annotations

from collections.abc import Sequence

from .model import ACCOUNT_LIMITS, QOS_LIMITS, SlurmAccount, SlurmQos, SlurmUser

HEADER_ALIASES = {
    "def qos": "defaultqos",
    "def acct": "defaultaccount",
    "descr": "description",
    "org": "organization",
    "maxtrespa": "maxtrespa",
    "parentname": "parentname",
}
PARENT_SHARE = "2147483647"


def parse_tres(text: str) -> dict[str, int]:
    found = {}
    for part in (text or "").split(","):
        if "=" in part:
            key, _, value = part.partition("=")
            if value.lstrip("-").isdigit() and int(value) >= 0:
                found[key.strip().lower()] = int(value)
    return found


def parse_time(text: str) -> int:
    """``00:00:30`` / ``1-00:00:00`` / ``30:00`` → seconds; empty → 0."""
    text = (text or "").strip()
    if not text:
        return 0
    days, _, clock = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def _rows(text: str, columns: Sequence[str] | None) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if columns is None:
        columns, lines = lines[0].split("|"), lines[1:]
    keys = [HEADER_ALIASES.get(c.strip().lower(), c.strip().lower()) for c in columns]
    return [dict(zip(keys, line.split("|"), strict=False)) for line in lines]


def parse_assoc(text: str, columns: Sequence[str] | None = None) -> tuple[list[SlurmAccount], list[SlurmUser]]:
    """Accounts (rows without a user) and user associations from ``show assoc``."""
    accounts, users = [], []
    for row in _rows(text, columns):
        account, user = row.get("account", "").lower(), row.get("user", "").lower()
        share = row.get("share", "1")
        fairshare = 1 if not share.isdigit() or share == PARENT_SHARE else int(share)
        qos = tuple(sorted(q for q in row.get("qos", "").lower().split(",") if q))
        if user:
            limits = _limits(row, ACCOUNT_LIMITS)
            users.append(
                SlurmUser(
                    user,
                    account,
                    "",
                    fairshare,
                    limits,
                    qos,
                    row.get("defaultqos", "").lower(),
                    partition=row.get("partition", "").lower(),
                    priority=row.get("priority", "").strip(),
                )
            )
        elif account != "root":
            accounts.append(
                SlurmAccount(
                    account,
                    row.get("parentname", "").lower() or "root",
                    fairshare,
                    "",
                    "",
                    qos,
                    row.get("defaultqos", "").lower(),
                    _limits(row, ACCOUNT_LIMITS),
                    priority=row.get("priority", "").strip(),
                )
            )
    return accounts, users


def _limits(row: dict[str, str], names: Sequence[str]) -> dict[str, str]:
    """The limits of ``names`` that are set in ``row`` (lowercase name → value as printed)."""
    return {n.lower(): row[n.lower()].lower() for n in names if row.get(n.lower(), "").strip()}


def parse_qos(text: str, columns: Sequence[str] | None = None) -> list[SlurmQos]:
    found = []
    for row in _rows(text, columns):
        found.append(
            SlurmQos(
                name=row.get("name", "").lower(),
                description=row.get("description", "").lower(),
                priority=int(row.get("priority") or 0),
                preempt=tuple(sorted(p for p in row.get("preempt", "").lower().split(",") if p)),
                preempt_mode=(row.get("preemptmode") or "cluster").lower(),
                grace_time_s=parse_time(row.get("gracetime", "")),
                preempt_exempt_s=parse_time(row.get("preemptexempttime", "")),
                usage_factor=float(row.get("usagefactor") or 1.0),
                grp_tres=parse_tres(row.get("grptres", "")),
                grp_tres_mins=parse_tres(row.get("grptresmins", "")),
                max_wall_min=parse_time(row["maxwall"]) // 60 if row.get("maxwall") else None,
                flags=tuple(sorted(f for f in row.get("flags", "").lower().split(",") if f)),
                max_tres=parse_tres(row.get("maxtres", "")),
                limits={k: v for k, v in _limits(row, QOS_LIMITS).items() if k not in ("maxtres", "grptresmins")},
            )
        )
    return found
