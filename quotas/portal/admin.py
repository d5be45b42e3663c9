"""A platform admin's work in the portal, no Django shell: set up an organisation from an empty
database (clusters, flavors, the organisation), and on each unit create units inside it, rename,
move, archive and bring back, set leads, add and remove members and their Slurm usernames, bind and
release namespaces. Every form calls the same audited service as the API; a refusal says which field
and why, and the page keeps what was typed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from quotas import services
from quotas.access import NotAllowedError, is_platform_admin
from quotas.errors import PLAIN_TEXT, InputError, control_character, form_id
from quotas.models import Cluster, ClusterKind, NamespaceBinding, OrgUnit
from quotas.policy import UnitKind
from quotas.policy.violations import PolicyViolationError

NEXT_KIND = {
    UnitKind.ORGANISATION.value: UnitKind.DEPARTMENT.value,
    UnitKind.DEPARTMENT.value: UnitKind.TEAM.value,
    UnitKind.TEAM.value: UnitKind.PROJECT.value,
}


def _admin(request: HttpRequest) -> None:
    if not is_platform_admin(request.user):
        raise PermissionDenied("only a platform admin may administer the organisation")


def _users(text: str) -> list[User]:
    names = [n.strip() for n in text.replace(";", ",").split(",") if n.strip()]
    found = {u.username: u for u in User.objects.filter(username__in=names, is_active=True)}
    missing = [n for n in names if n not in found]
    if missing:
        raise InputError("leads", f"no active user {', '.join(missing)}", "give existing usernames, comma-separated")
    return [found[n] for n in names]


def _run(request: HttpRequest, done: Callable[[], str]) -> bool:
    """Call a service; put its success or its refusal (field and reason) in the messages. A field holding a
    control character (a NUL byte, which PostgreSQL cannot store or even look up) is refused first, by name."""
    for name, values in request.POST.lists():
        bad = next((c for c in map(control_character, values) if c), None)
        if bad:
            messages.error(request, f"{name}: contains the control character {bad}: {PLAIN_TEXT}")
            return False
    try:
        messages.success(request, done())
        return True
    except InputError as exc:
        messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.errors.items()))
    except PolicyViolationError as exc:
        messages.error(request, "; ".join(f"{v.message} — {v.hint}" for v in exc.violations))
    except NotAllowedError as exc:
        messages.error(request, str(exc))
    return False


@login_required
def setup(request: HttpRequest) -> HttpResponse:
    """Clusters, flavors and organisations; archived units to bring back."""
    _admin(request)
    if request.method == "POST":
        post, reason = request.POST, request.POST.get("reason", "")
        action = post.get("action")
        if action == "cluster":
            _run(
                request,
                lambda: (
                    "Cluster "
                    + services.cluster_set(
                        actor=request.user,
                        reason=reason,
                        name=post.get("name", "").strip(),
                        kind=post.get("kind", ClusterKind.KUBERNETES),
                        connection_ref=post.get("connection_ref", "").strip(),
                    ).name
                    + " saved."
                ),
            )
        elif action == "flavor":
            cluster = Cluster.objects.filter(pk=form_id(post.get("cluster"))).first()

            def flavor() -> str:
                if cluster is None:
                    raise InputError("cluster", "pick a cluster", "add one first")
                devices = post.get("physical_devices", "").strip()
                if not (devices.isascii() and devices.isdigit()):
                    raise InputError("physical_devices", f"{devices!r} is not a number of devices", "e.g. 64")
                made = services.flavor_set(
                    actor=request.user,
                    reason=reason,
                    cluster=cluster,
                    name=post.get("name", "").strip(),
                    accelerator_model=post.get("accelerator_model", "").strip(),
                    device_memory_gb=form_id(post.get("device_memory_gb")),
                    physical_devices=int(devices),
                )
                return f"Flavor {made.key} saved."

            _run(request, flavor)
        elif action == "organisation":
            _run(
                request,
                lambda: (
                    "Organisation "
                    + services.org_unit_create(
                        actor=request.user,
                        reason=reason,
                        parent=None,
                        kind=UnitKind.ORGANISATION.value,
                        slug=post.get("slug", "").strip(),
                        name=post.get("name", "").strip(),
                    ).path
                    + " created."
                ),
            )
        elif action == "person":
            from quotas.services.people import person_add

            def person() -> str:
                made = person_add(
                    actor=request.user, reason=reason, username=post.get("username", ""),
                    email=post.get("email", ""), platform_admin=post.get("platform_admin") == "on",
                )  # fmt: skip
                mailed = f" It was mailed to {made.email}." if made.email else ""
                return (
                    f"{made.username} added. Give them this one-time link to set their password: "
                    f"{made.set_password_link}{mailed}"
                )

            _run(request, person)
        elif action == "unarchive":
            unit = get_object_or_404(OrgUnit, pk=form_id(post.get("unit")))
            _run(
                request,
                lambda: f"{services.org_unit_unarchive(actor=request.user, reason=reason, unit=unit)} unit(s) back.",
            )
        return redirect("quotas:setup")
    archived = OrgUnit.objects.filter(archived_at__isnull=False).order_by("path")
    tops = [u for u in archived if not any(u.path.startswith(f"{o.path}/") for o in archived if o.pk != u.pk)]
    return render(
        request,
        "quotas/setup.html",
        {
            "clusters": Cluster.objects.prefetch_related("flavors").order_by("name"),
            "kinds": ClusterKind.choices,
            "archived": tops,
        },
    )


@login_required
def unit_admin(request: HttpRequest, unit_id: int) -> HttpResponse:
    """One POST per task on a unit's page (``action``), each through its audited service."""
    _admin(request)
    unit = get_object_or_404(OrgUnit, pk=unit_id, archived_at__isnull=True)
    if request.method != "POST":
        return redirect("quotas:unit", unit_id=unit.pk)
    post, reason, actor = request.POST, request.POST.get("reason", ""), request.user
    action = post.get("action")
    tasks: dict[str, Callable[[], str]] = {
        "create": lambda: (
            "Created "
            + services.org_unit_create(
                actor=actor,
                reason=reason,
                parent=unit,
                kind=post.get("kind") or NEXT_KIND.get(unit.kind, UnitKind.PROJECT.value),
                slug=post.get("slug", "").strip(),
                name=post.get("name", "").strip(),
            ).path
            + "."
        ),
        "rename": lambda: (
            "Saved the name, Slurm account and cost centre of "
            + services.org_unit_update(
                actor=actor,
                reason=reason,
                unit=unit,
                name=post.get("name", "").strip(),
                slurm_account=post.get("slurm_account", "").strip(),
                cost_centre=post.get("cost_centre", "").strip(),
            ).path
            + "."
        ),
        "leads": lambda: (
            "Leads of "
            + services.org_unit_update(actor=actor, reason=reason, unit=unit, leads=_users(post.get("leads", ""))).path
            + " set."
        ),
        "move": lambda: (
            "Moved to "
            + services.org_unit_move(
                actor=actor,
                reason=reason,
                unit=unit,
                new_parent=get_object_or_404(OrgUnit, path=post.get("parent", "").strip(), archived_at__isnull=True),
            ).path
            + "."
        ),
        "archive": lambda: f"Archived {services.org_unit_archive(actor=actor, reason=reason, unit=unit)} unit(s).",
        "member_add": lambda: (
            "Member "
            + (
                services.membership_add(
                    actor=actor,
                    reason=reason,
                    unit=unit,
                    slurm_username=post.get("slurm_username", "").strip(),
                    slurm_cluster=_slurm_cluster(post),
                ).slurm_username
            )
            + " added."
        ),
        "member_remove": lambda: _member_remove(actor, reason, unit, post.get("slurm_username", "")),
        "bind": lambda: "Bound " + _bind(actor, reason, unit, post) + ".",
        "unbind": lambda: _unbind(actor, reason, unit, post),
    }
    if action not in tasks:
        messages.error(request, f"unknown action {action!r}")
    elif _run(request, tasks[action]) and action == "archive":
        return redirect("quotas:setup")
    unit.refresh_from_db()
    if unit.archived_at is not None:
        return redirect("quotas:setup")
    return redirect(f"{unit_url(unit)}#administer")


def unit_url(unit: OrgUnit) -> str:
    from django.urls import reverse

    return reverse("quotas:unit", kwargs={"unit_id": unit.pk})


def _slurm_cluster(post: Any) -> Cluster | None:
    """The Slurm cluster a member is added on; None (every Slurm cluster) when the form names none."""
    if not post.get("slurm_cluster"):
        return None
    found = Cluster.objects.filter(pk=form_id(post.get("slurm_cluster")), kind=ClusterKind.SLURM).first()
    if found is None:
        raise InputError("slurm_cluster", "no such Slurm cluster", "pick one from the list, or every Slurm cluster")
    return found


def _member_remove(actor: Any, reason: str, unit: OrgUnit, username: str) -> str:
    removed = services.membership_remove(actor=actor, reason=reason, unit=unit, slurm_username=username)
    return f"{removed} member(s) removed."


def _bind(actor: Any, reason: str, unit: OrgUnit, post: Any) -> str:
    cluster = Cluster.objects.filter(pk=form_id(post.get("cluster"))).first()
    if cluster is None:
        raise InputError("cluster", "pick a Kubernetes cluster", "add one on the Set up page first")
    binding = services.namespace_bind(
        actor=actor, reason=reason, unit=unit, cluster=cluster, namespace=post.get("namespace", "").strip()
    )
    return f"{cluster.name}/{binding.namespace}"


def _unbind(actor: Any, reason: str, unit: OrgUnit, post: Any) -> str:
    binding = get_object_or_404(NamespaceBinding, pk=form_id(post.get("binding")), unit=unit)
    services.namespace_unbind(
        actor=actor, reason=reason, unit=unit, cluster=binding.cluster, namespace=binding.namespace
    )
    return f"Released {binding.cluster.name}/{binding.namespace}."
