"""Bindings of units to clusters: Kubernetes namespaces and members' Slurm usernames."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from quotas.errors import InputError, full_clean
from quotas.models import Cluster, ClusterKind, Membership, NamespaceBinding, OrgUnit

from .audit import Actor, audit_event, audit_write, require_reason
from .locks import lock_units


@transaction.atomic
def namespace_bind(
    *, actor: Actor, reason: str, unit: OrgUnit, cluster: Cluster, namespace: str, local_queue_name: str = ""
) -> NamespaceBinding:
    """Bind a namespace of a Kubernetes cluster to ``unit``. A namespace belongs to one unit only."""
    reason = require_reason(reason)
    if cluster.kind != ClusterKind.KUBERNETES:
        raise InputError(
            "cluster", f"{cluster.name} is a {cluster.kind} cluster", "bind namespaces on a Kubernetes cluster"
        )
    lock_units([unit.pk])
    holder = NamespaceBinding.objects.select_related("unit").filter(cluster=cluster, namespace=namespace).first()
    if holder is not None:
        if holder.unit_id == unit.pk:
            return holder
        raise InputError(
            "namespace",
            f"{cluster.name}/{namespace} is already bound to {holder.unit.path}",
            "unbind it there first: a namespace belongs to exactly one unit",
        )
    binding = NamespaceBinding(unit=unit, cluster=cluster, namespace=namespace, local_queue_name=local_queue_name)
    full_clean(binding)
    binding.save()
    audit_write(
        [
            audit_event(
                actor=actor,
                action="namespace_bind",
                obj_type="namespacebinding",
                obj_id=binding.pk,
                obj_repr=f"{cluster.name}/{namespace}",
                before=None,
                after={"unit": unit.path, "cluster": cluster.name, "namespace": namespace},
                reason=reason,
                unit_path=unit.path,
            )
        ]
    )
    return binding


@transaction.atomic
def membership_add(
    *,
    actor: Actor,
    reason: str,
    unit: OrgUnit,
    user: User | None = None,
    slurm_username: str = "",
    slurm_cluster: Cluster | None = None,
) -> Membership:
    """Add a member (a portal user, a Slurm username, or both) to ``unit``; idempotent. With ``slurm_cluster``
    the member's association is on that Slurm cluster only, else on every Slurm cluster."""
    reason = require_reason(reason)
    if user is None and not slurm_username:
        raise InputError("slurm_username", "a member needs a user or a Slurm username", "give at least one")
    if slurm_cluster is not None and slurm_cluster.kind != ClusterKind.SLURM:
        raise InputError(
            "slurm_cluster",
            f"{slurm_cluster.name} is a {slurm_cluster.kind} cluster",
            "name a Slurm cluster, or none for every Slurm cluster",
        )
    if slurm_cluster is not None and not slurm_username:
        raise InputError("slurm_cluster", "a cluster is only for a Slurm username", "give the Slurm username too")
    lock_units([unit.pk])
    found = Membership.objects.filter(
        unit=unit, user=user, slurm_username=slurm_username, slurm_cluster=slurm_cluster
    ).first()
    if found:
        return found
    taken = (
        Membership.objects.filter(unit=unit, slurm_username=slurm_username, slurm_cluster=slurm_cluster)
        .select_related("user")
        .first()
        if slurm_username
        else None
    )
    if taken is not None:  # the same Slurm username with another (or no) person: one membership per username
        held = f"by {taken.user.get_username()}" if taken.user else "without a portal user"
        raise InputError(
            "slurm_username",
            f"{slurm_username} is already a member of {unit.path} {held}",
            "remove that membership first, or add the person without the Slurm username",
        )
    member = Membership(unit=unit, user=user, slurm_username=slurm_username, slurm_cluster=slurm_cluster)
    full_clean(member)
    member.save()
    who = slurm_username or (user.get_username() if user else "")
    audit_write(
        [
            audit_event(
                actor=actor,
                action="membership_add",
                obj_type="membership",
                obj_id=member.pk,
                obj_repr=f"{unit.path} {who}",
                before=None,
                after={
                    "user": user.get_username() if user else None,
                    "slurm_username": slurm_username,
                    "slurm_cluster": slurm_cluster.name if slurm_cluster else None,
                },
                reason=reason,
                unit_path=unit.path,
            )
        ]
    )
    return member


@transaction.atomic
def namespace_unbind(*, actor: Actor, reason: str, unit: OrgUnit, cluster: Cluster, namespace: str) -> None:
    """Release ``cluster``/``namespace`` from ``unit``; InputError when it is not bound there."""
    reason = require_reason(reason)
    lock_units([unit.pk])
    binding = NamespaceBinding.objects.filter(unit=unit, cluster=cluster, namespace=namespace).first()
    if binding is None:
        raise InputError(
            "namespace", f"{cluster.name}/{namespace} is not bound to {unit.path}", "see the unit's namespaces"
        )
    audit_write(
        [
            audit_event(
                actor=actor,
                action="namespace_unbind",
                obj_type="namespacebinding",
                obj_id=binding.pk,
                obj_repr=f"{cluster.name}/{namespace}",
                before={"unit": unit.path, "cluster": cluster.name, "namespace": namespace},
                after=None,
                reason=reason,
                unit_path=unit.path,
            )
        ]
    )
    binding.delete()


@transaction.atomic
def membership_remove(
    *,
    actor: Actor,
    reason: str,
    unit: OrgUnit,
    user: User | None = None,
    slurm_username: str = "",
    slurm_cluster: Cluster | None = None,
) -> int:
    """Remove the member of ``unit`` with this user and/or Slurm username (on ``slurm_cluster`` only, when
    given); returns how many rows went. InputError when there is no such member."""
    reason = require_reason(reason)
    if user is None and not slurm_username:
        raise InputError("slurm_username", "say which member: a user or a Slurm username", "give at least one")
    lock_units([unit.pk])
    found = Membership.objects.filter(unit=unit)
    if user is not None:
        found = found.filter(user=user)
    if slurm_username:
        found = found.filter(slurm_username=slurm_username)
    if slurm_cluster is not None:
        found = found.filter(slurm_cluster=slurm_cluster)
    members = list(found.select_related("user", "slurm_cluster"))
    if not members:
        who = slurm_username or (user.get_username() if user else "")
        raise InputError("slurm_username", f"{who} is not a member of {unit.path}", "see the unit's members")
    audit_write(
        [
            audit_event(
                actor=actor,
                action="membership_remove",
                obj_type="membership",
                obj_id=m.pk,
                obj_repr=f"{unit.path} {m.slurm_username or (m.user.get_username() if m.user else '')}",
                before={
                    "user": m.user.get_username() if m.user else None,
                    "slurm_username": m.slurm_username,
                    "slurm_cluster": m.slurm_cluster.name if m.slurm_cluster else None,
                },
                after=None,
                reason=reason,
                unit_path=unit.path,
            )
            for m in members
        ]
    )
    Membership.objects.filter(pk__in=[m.pk for m in members]).delete()
    return len(members)
