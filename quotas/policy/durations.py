"""Durations as people write them: ``90`` (seconds), ``"30m"``, ``"1h30m"``, ``"2d"``, ``"PT15M"``.

Contracts and tiers keep whole seconds; these helpers read and render them.
"""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_HUMAN_RE = re.compile(r"^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_ISO_RE = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")


class DurationError(ValueError):
    def __init__(self, raw: object) -> None:
        super().__init__(f"{raw!r} is not a duration")
        self.raw = raw
        self.hint = 'write seconds (e.g. 900) or a duration such as "15m", "1h30m", "2d" or "PT15M"'


def parse_duration(raw: object) -> int:
    """Return ``raw`` in whole seconds; raise :class:`DurationError` for anything else or < 0."""
    if isinstance(raw, bool) or raw is None:
        raise DurationError(raw)
    if isinstance(raw, int):
        if raw < 0:
            raise DurationError(raw)
        return raw
    if not isinstance(raw, str):
        raise DurationError(raw)
    text = raw.strip()
    if text.isdigit():
        return int(text)
    iso = _ISO_RE.match(text.upper())
    if iso and any(iso.groups()):
        d, h, m, s = (int(g or 0) for g in iso.groups())
        return d * 86400 + h * 3600 + m * 60 + s
    human = _HUMAN_RE.match(text.lower())
    if human and any(human.groups()):
        return sum(int(g or 0) * _UNITS[u] for g, u in zip(human.groups(), "wdhms", strict=True))
    raise DurationError(raw)


def format_duration(seconds: int) -> str:
    """Render seconds compactly: ``5400`` → ``"1h30m"``, ``0`` → ``"0s"``."""
    if seconds == 0:
        return "0s"
    parts = []
    for unit in "dhms":
        size = _UNITS[unit]
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
