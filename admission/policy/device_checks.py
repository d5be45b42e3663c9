"""How much: each pod set's devices against what its unit may ever get on the flavors it may land on
(node selectors and affinity read as the scheduler reads them)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from quotas.policy import pods
from quotas.policy.placement import matching_flavors
from quotas.policy.sharing import MIG_PREFIX, SHARED_GPU, show

from .review import Decision, Reason, Review
from .workload import DRA, PodSet, describe_requirements


def fitting_flavors(r: Review, podset: PodSet) -> tuple[str, ...] | None:
    """The flavors a pod set may land on by Kueue's matching rule (quotas.policy.placement: its node selector
    AND any term of its required node affinity on the keys of every flavor, its tolerations against each
    flavor's taints); None: any flavor; (): none."""
    return matching_flavors(podset.spec, r.policy.flavor_labels, r.policy.flavor_taints)


def _where(flavors: tuple[str, ...] | None) -> str:
    if flavors is None:
        return "on any flavor"
    return f"on {flavors[0]}" if len(flavors) == 1 else f"on any of {', '.join(flavors)}"


def _selects(r: Review, names: tuple[str, ...]) -> str:
    """Each flavor with the node labels that select it: ``a100-80gb (allot.dev/flavor=a100-80gb)``."""
    labels = r.policy.flavor_labels
    return "; ".join(
        f"{n} ({', '.join(f'{k}={v}' for k, v in sorted(labels.get(n, {}).items())) or 'no node labels'})"
        for n in names
    )


def _unknown_pin(r: Review, podset: PodSet) -> Decision:
    """A pin no flavor of the cluster satisfies (Kueue: "flavor … doesn't match node affinity" for each)."""
    known = _selects(r, r.policy.flavor_names)
    return r.deny(
        Reason.UNKNOWN_FLAVOR,
        f"{podset.name} is pinned to {describe_requirements(podset.spec)}, which no flavor of cluster "
        f"{r.policy.cluster} satisfies: it would wait forever; pin one of its flavors instead: {known or 'none'}",
    )


def _pin_elsewhere(
    r: Review, podset: PodSet, what: str, offered: tuple[str, ...], fitting: tuple[str, ...]
) -> Decision:
    """A pin that keeps the pod set off every flavor offering what it asks for: the flavors that would take it."""
    return r.deny(
        Reason.PIN_MISMATCH,
        f"{podset.name} asks for {what}, but it is pinned to {describe_requirements(podset.spec)}, which only "
        f"{', '.join(fitting)} {'satisfies' if len(fitting) == 1 else 'satisfy'} and "
        f"{'it does' if len(fitting) == 1 else 'they do'} not offer it: it would wait forever on cluster "
        f"{r.policy.cluster}; pin a flavor that offers it instead: {_selects(r, offered)}",
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
        f"{podset.name} asks for {name}, which no flavor of cluster {r.policy.cluster} offers: it would wait "
        f"forever; {offers}",
    )


def _one_flavor(r: Review, podset: PodSet, names: list[str]) -> Decision:
    """Devices of two kinds in one pod set that no one flavor offers together (Kueue gives a pod set one flavor
    for every resource of the group)."""
    offers = "; ".join(f"{n} on {', '.join(r.policy.offering[n]) or 'no flavor'}" for n in sorted(names))
    return r.deny(
        Reason.PROFILE_NOT_OFFERED,
        f"{podset.name} asks for {' and '.join(sorted(names))} in one pod, but Kueue gives a pod one flavor for "
        f"all of them and no flavor of cluster {r.policy.cluster} offers them together: it would wait forever "
        f"({offers}); ask for them in separate pods",
    )


def _placed(r: Review, podset: PodSet, held: dict[str, int]) -> tuple[Decision | None, tuple[str, ...] | None]:
    """Where the pod set's devices may land: the flavors its pin allows that offer everything it asks for
    (whole GPUs and slices share one resource group, so one flavor must offer them all; a mapped accelerator is
    its flavor's alone). (a refusal, None) where none may; (None, None) for any flavor."""
    fitting = fitting_flavors(r, podset)
    if fitting == ():  # whatever it asks for, GPUs or none: no node of any flavor satisfies the pin
        return _unknown_pin(r, podset), None
    policy = r.policy
    if fitting is None and policy.whole_flavors is None and all(policy.counted[n] is None for n in held):
        return None, None  # the usual case: whole GPUs, unpinned, every flavor whole (none shared): any flavor
    counted, everywhere = policy.counted, policy.flavor_names
    grouped = [n for n in held if counted[n] is None or n in policy.weights]
    candidates = set(everywhere if fitting is None else fitting)
    for name in held:
        offered = policy.offering[name]
        if not offered:
            return _not_offered(r, podset, name), None
        if fitting is not None and not set(offered) & set(fitting):
            return _pin_elsewhere(r, podset, name, offered, fitting), None
        if name in grouped:
            candidates &= set(offered)
    if grouped and not candidates:
        return _one_flavor(r, podset, grouped), None
    found = tuple(n for n in everywhere if n in candidates)
    return None, (None if len(found) == len(everywhere) else found)


def devices(r: Review) -> list[Decision]:
    """Per group of pod sets that may land on the same flavors: the devices they hold at once, in
    GPU-equivalents (a slice by its weight), must fit the largest ceiling among those flavors; a pin no
    flavor matches, a pin that keeps a pod set off every flavor offering its devices, a slice no flavor
    offers, and accelerators Allot does not count, are refused."""
    policy, rule = r.policy, r.rule
    counted, weights = policy.counted, policy.weights
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
        held = {n: v for n, v in podset.held_per_pod(counted).items() if v}
        if not held and not policy.matched(pods.named(podset.spec)):
            continue  # asks for nothing the queues cover: Kueue assigns it no flavor, whatever its pins
        refusal, placed = _placed(r, podset, held)
        if refusal is not None:
            found.append(refusal)
            continue
        for name, per_pod in held.items():
            flavor = counted[name]
            key = (flavor,) if flavor is not None and name not in weights else placed
            total, weight = podset.count * per_pod, weights.get(name)
            groups[key] = groups.get(key, 0) + (total if weight is None else total * weight)
            asked.setdefault(key, {})[name] = asked.get(key, {}).get(name, 0) + total
    for key, wanted in sorted(groups.items(), key=lambda kv: str(kv[0])):
        names = tuple(rule.ceilings) if key is None else key
        limit = max((rule.ceilings.get(n, 0) for n in names), default=0)
        if wanted <= limit:
            continue
        what = _what(wanted, asked[key], weights)
        ask = f" (ask {rule.lead})" if rule.lead else ""
        if limit == 0:
            has = sorted(n for n, c in rule.ceilings.items() if c > 0)
            where = f"use a flavor it has quota on: {', '.join(has)}" if has else "it has quota on no flavor here"
            message = (
                f"asks for {what} {_where(key)}, but {rule.unit_path} has no quota there: it would wait forever; "
                f"{where}, or ask for quota in Allot{ask}"
            )
        else:
            best = [n for n in names if rule.ceilings.get(n, 0) == limit]
            why = (
                "what Kueue can ever admit to its queue: the guarantees its children keep are not its to use"
                if all(n in rule.reach_limited for n in best)
                else "guarantee + burst"
            )
            message = (
                f"asks for {what} {_where(key)}, but {rule.unit_path} can never hold more than {show(limit)} there "
                f"({why}): it would wait forever; ask for at most {show(limit)}, or request a larger quota{ask}"
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
