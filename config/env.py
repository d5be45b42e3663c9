"""The one place that reads the environment. Settings call these readers; nothing else reads os.environ.

Every call names its variable, its default and a ``help`` text (and ``shown``, how to print a default
computed from other settings): the configuration reference (docs/reference/configuration.md) is
generated from these calls by :mod:`config.settings_doc`, so a setting cannot be added undocumented.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None, *, required: bool = False, help: str = "", shown: str = "") -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        if required:
            raise ImproperlyConfigured(f"{name} must be set (see docs/reference/configuration.md)")
        return default or ""
    return value


def env_bool(name: str, default: bool, *, help: str = "", shown: str = "") -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use true or false")


def _number(name: str, default: float, kind: type, what: str) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not {what}") from exc


def env_int(name: str, default: int, *, help: str = "", shown: str = "") -> int:
    return int(_number(name, default, int, "a whole number"))


def env_float(name: str, default: float, *, help: str = "", shown: str = "") -> float:
    return float(_number(name, default, float, "a number (e.g. 0.5)"))


def env_list(name: str, default: list[str], *, help: str = "", shown: str = "") -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]
