"""Parts of the portal's pages that other apps contribute, so the quota pillar imports nothing from
them: an app registers its panels once at start-up (its ``AppConfig.ready``), a page asks for them.

- a **unit panel** is ``fn(request, unit, base) -> context``: ``base`` holds what the unit page
  already read (``quotas``: its Quota rows, ``chart_rows``: (flavor, guarantee, ceiling, held) per
  GPU flavor); the context it returns is merged into the unit page's (the template includes the
  app's own partial where the panel goes, e.g. ``accounting/_budgets.html``);
- a **home panel** is ``fn(request, led_paths) -> context`` for the organisation page;
- a **request panel** is ``fn(request, change_request, gpu_items) -> context`` for a pending change
  request's page, beside what its approver decides on: ``gpu_items`` are the (unit id, flavor id) of
  its GPU quota items.

Registered by name: registering again (a second ``ready``) replaces, never duplicates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest

from quotas.models import ChangeRequest, OrgUnit

UnitPanel = Callable[[HttpRequest, OrgUnit, Mapping[str, Any]], Mapping[str, Any]]
HomePanel = Callable[[HttpRequest, list[str]], Mapping[str, Any]]
RequestPanel = Callable[[HttpRequest, ChangeRequest, list[tuple[int, int]]], Mapping[str, Any]]
_unit: dict[str, UnitPanel] = {}
_home: dict[str, HomePanel] = {}
_request: dict[str, RequestPanel] = {}


def register_unit_panel(name: str, panel: UnitPanel) -> None:
    _unit[name] = panel


def register_home_panel(name: str, panel: HomePanel) -> None:
    _home[name] = panel


def register_request_panel(name: str, panel: RequestPanel) -> None:
    _request[name] = panel


def unit_panels(request: HttpRequest, unit: OrgUnit, base: Mapping[str, Any]) -> dict[str, Any]:
    context: dict[str, Any] = {}
    for panel in _unit.values():
        context.update(panel(request, unit, base))
    return context


def home_panels(request: HttpRequest, led: list[str]) -> dict[str, Any]:
    context: dict[str, Any] = {}
    for panel in _home.values():
        context.update(panel(request, led))
    return context


def request_panels(request: HttpRequest, change_request: ChangeRequest, items: list[tuple[int, int]]) -> dict[str, Any]:
    context: dict[str, Any] = {}
    for panel in _request.values():
        context.update(panel(request, change_request, items))
    return context
