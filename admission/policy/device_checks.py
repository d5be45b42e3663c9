"""How much: each pod set's devices against what its unit may ever get on the flavors it may land on
(node selectors and affinity read as the scheduler reads them)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from quotas.policy.placement import matching_flavors
from quotas.policy.sharing import MIG_PREFIX, SHARED_GPU, show

from .review import Decision, Reason, Review
from .workload import DRA, PodSet, describe_requirements


def fitting_flavors(r: Review, podset: PodSet) -> tuple[str, ...] | None:
    """The flavors a pod set may land on given its node selector AND its required node affinity (any
    of its terms), as Kubernetes combines them (quotas.policy.placement); None: any flavor; (): none."""
    return matching_flavors(podset.spec, r.policy.flavor_labels)


def _where(flavors: tuple[str, ...] | None) -> str:
    if flavors is None:
        return "on any flavor"
    return f"on {flavors[0]}" if len(flavors) == 1 else f"on any of {', '.join(flavors)}"


def _unknown_pin(r: Review, podset: PodSet, what: str) -> Decision:
    known = "; ".join(
        f"{f.name} ({', '.join(f'{k}={v}' for k, v in sorted(f.node_labels.items()))})" for f in r.policy.flavors
    )
    return r.deny(
        Reason.UNKNOWN_FLAVOR,
        f"{podset.name} is pinned to {describe_requirements(podset.spec)}, which {what} cluster {r.policy.cluster} "
        f"has: it would wait forever; flavors: {known or 'none'}",
    )


def _not_offered(r: Review, podset: PodSet, name: str) -> Decision:
    """A slice no flavor of the cluster offers, or whole GPUs where only slices are: the ones it may use."""
    offers = "; ".join(
        f"{f.name} ({f.sharing}) offers "
        + ", ".join(f"{p} = {show(w)} GPU" for p, w in sorted(f.profiles.values(), key=lambda pw: (pw[1], pw[0])))
        for f in r.policy.flavors
        if f.profiles
    )
    whole = r.policy.whole_flavors
    if whole:
        offers += f"; whole GPUs (nvidia.com/gpu) on {', '.join(whole)}"
    return r.deny(
        Reason.PROFILE_NOT_OFFERED,
        f"{podset.name} asks for {name}, which no flavor it may land on offers on cluster {r.policy.cluster}: it "
        f"would wait forever; {offers}",
    )


def devices(r: Review) -> list[Decision]:
    """Per group of pod sets that may land on the same flavors: the devices they hold at once, in
    GPU-equivalents (a slice by its weight), must fit the largest ceiling among those flavors; a pin no
    flavor matches, a slice no flavor offers, and accelerators Allot does not count, are refused."""
    policy, rule = r.policy, r.rule
    counted, weights, whole = policy.counted, policy.weights, policy.whole_flavors
    found = []
    groups: dict[tuple[str, ...] | None, Fraction | int] = {}  # whole GPUs add up as ints, slices by weight
    asked: dict[tuple[str, ...] | None, dict[str, int]] = {}
    for podset in r.sets:
        ungoverned = podset.ungoverned(counted)
        slices = [n for n in ungoverned if n.startswith(MIG_PREFIX) or n == SHARED_GPU]
        if slices and any(f.profiles for f in policy.flavors):
            found.append(_not_offered(r, podset, ", ".join(slices)))
            ungoverned = [n for n in ungoverned if n not in slices]
        if DRA in ungoverned:  # partitionable devices through DRA: not governed yet, and no mapping makes them so
            ungoverned = [n for n in ungoverned if n != DRA]
            found.append(
                r.deny(
                    Reason.UNGOVERNED_ACCELERATOR,
                    f"{podset.name} asks for {DRA}: Allot does not govern DRA devices on cluster {policy.cluster} "
                    f"yet, so it cannot count them against {rule.unit_path}'s quota — request "
                    f"{' or '.join(sorted(counted))} instead (a MIG slice as nvidia.com/mig-<profile>, where a flavor "
                    "offers it)",
                )
            )
        if ungoverned:
            found.append(
                r.deny(
                    Reason.UNGOVERNED_ACCELERATOR,
                    f"{podset.name} asks for {', '.join(ungoverned)}, which Allot does not count on cluster "
                    f"{policy.cluster}: request {' or '.join(sorted(counted))}, or ask a platform admin "
                    + ("for a flavor that offers it (sharing: mig, mps or time-slicing) or " if slices else "")
                    + "to map it to a flavor (ALLOT_ADMISSION_ACCELERATORS)",
                )
            )
        if not podset.count:
            continue
        fitting = fitting_flavors(r, podset)
        if fitting == ():  # whatever it asks for, GPUs or none: no node of any flavor satisfies the pin
            found.append(_unknown_pin(r, podset, "no flavor of"))
            continue
        for name, per_pod in podset.held_per_pod(counted).items():
            flavor = counted[name]
            key: tuple[str, ...] | None = fitting
            if flavor is not None:  # a resource mapped to one flavor: the pin must allow it
                if fitting is not None and flavor not in fitting:
                    found.append(_unknown_pin(r, podset, f"not {flavor} (where its devices are), nor any flavor of"))
                    continue
                key = (flavor,)
            elif name not in weights and whole is not None:  # whole GPUs: never on a shared flavor
                key = tuple(f for f in (fitting or whole) if f in whole)
                if not key:
                    found.append(_not_offered(r, podset, name))
                    continue
            held, weight = podset.count * per_pod, weights.get(name)
            groups[key] = groups.get(key, 0) + (held if weight is None else held * weight)
            asked.setdefault(key, {})[name] = asked.get(key, {}).get(name, 0) + held
    for key, wanted in sorted(groups.items(), key=lambda kv: str(kv[0])):
        names = tuple(rule.ceilings) if key is None else key
        limit = max((rule.ceilings.get(n, 0) for n in names), default=0)
        if wanted <= limit:
            continue
        what = _what(wanted, asked[key], weights)
        if limit == 0:
            message = (
                f"asks for {what} {_where(key)}, but {rule.unit_path} has no quota there: "
                f"ask for quota in Allot, or use a flavor it has"
            )
        else:
            message = (
                f"asks for {what} {_where(key)}, but {rule.unit_path} can never hold more than {limit} there "
                f"(guarantee + burst): it would wait forever; ask for at most {limit}, or request a larger quota"
            )
        found.append(r.deny(Reason.EXCEEDS_CEILING, message))
    return found


def _what(wanted: Fraction | int, asked: Mapping[str, int], weights: Mapping[str, Fraction]) -> str:
    """``8 GPUs``, or ``1.14 GPU-equivalents (8 × nvidia.com/mig-1g.10gb)`` where slices are counted."""
    if not any(name in weights for name in asked):
        return f"{show(wanted)} GPUs"
    parts = ", ".join(f"{n} × {name}" for name, n in sorted(asked.items()))
    return f"{show(wanted)} GPU-equivalent{'' if wanted == 1 else 's'} ({parts})"


def may_use(r: Review, flavor: str) -> bool:
    """Some pod set asks for devices that may land on ``flavor``."""
    for podset in r.sets:
        if not podset.count:
            continue
        fitting = fitting_flavors(r, podset)
        for mapped in podset.devices_per_pod(r.policy.counted):
            if (mapped is None or mapped == flavor) and (fitting is None or flavor in fitting):
                return True
    return False
