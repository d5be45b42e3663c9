"""Shared and partitioned GPUs: what one slice of a flavor counts, in GPU-equivalents. Pure.

A flavor shares its devices under one **sharing contract** (chapter 8.10–8.11: fractional sharing needs an
explicit MIG, MPS or time-slicing contract):

* ``whole`` — the default: a pod asks for ``nvidia.com/gpu`` and holds whole devices;
* ``mig`` — the devices are partitioned by NVIDIA MIG and pods ask for ``nvidia.com/mig-<profile>``
  (the device plugin's *mixed* strategy); each profile is a fixed share of a device with isolated compute
  and memory;
* ``mps`` and ``time-slicing`` — each device is shared by ``shares`` pods (the device plugin's
  ``replicas``) that ask for ``nvidia.com/gpu.shared`` (its ``renameByDefault: true``, so a shared device
  is never mistaken for a whole one on the same cluster); MPS limits each client's compute, time-slicing
  isolates nothing.

Everything a flavor offers is counted in **GPU-equivalents**: a whole device is 1, a slice its weight.
Quotas, budgets and usage on a shared flavor are in GPU-equivalents (whole ones for quotas: a guarantee of
2 on an H100 MIG flavor is 14 ``1g.10gb`` slices, or 4 ``3g.40gb``).

**The weight rule** (:func:`weight_of`): a MIG profile weighs the *larger* of its compute share (its
compute slices of the device's, 7 on A100/H100/H200) and its memory share (its memory slices of the
device's, 8 there). A slice keeps both from every other user of the device, so the larger share is what
it takes: 1g.10gb on an 80 GB H100 is max(1/7, 1/8) = 1/7, 1g.20gb is max(1/7, 2/8) = 1/4, 3g.40gb is
max(3/7, 4/8) = 1/2. No set of slices weighing N ever holds more compute or memory than N devices have, so a
quota in equivalents never promises more than the pool; the cost is that some full layouts weigh a little
over 1 (3g.40gb + 4g.40gb = 1/2 + 4/7). An operator may override any profile's weight (e.g. ``3/7`` to
charge compute only). An MPS or time-sliced share weighs 1/``shares``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
EQUIVALENTS = "allot.dev/gpu-equivalent-millionths"
"""The one currency Kueue counts a shared flavor's quota in (its ResourceTransformation's output): millionths
of a GPU-equivalent, in whole numbers. Kueue keeps every resource but CPU in whole units and rounds a fraction
up — on the real Kueue (v0.13), seven slices transformed into ``142857u`` each were counted as 7, not 0.999999
— so the currency must be integral."""
MICRO = 10**6
MAX_SHARES = 64


class Sharing(StrEnum):
    WHOLE = "whole"
    MIG = "mig"
    MPS = "mps"
    TIME_SLICING = "time-slicing"

    @property
    def isolation(self) -> str:
        return _ISOLATION[self]


_ISOLATION = {
    Sharing.WHOLE: "whole devices, nothing shared",
    Sharing.MIG: "hardware partitions: each slice has its own compute and memory (faults and noise stay inside it)",
    Sharing.MPS: "MPS: each share's compute is capped, memory and faults are shared with the others on the device",
    Sharing.TIME_SLICING: "time-slicing: shares take turns on the whole device, nothing is isolated",
}


@dataclass(frozen=True, slots=True)
class Part:
    """A GPU model that MIG partitions: its compute and memory slices and the profiles it offers."""

    name: str
    memory_gb: int
    compute_slices: int
    memory_slices: int
    profiles: Mapping[str, tuple[int, int]]
    """Per profile name (``1g.10gb``): its compute and memory slices."""


def _profiles(*rows: tuple[str, int, int]) -> dict[str, tuple[int, int]]:
    return {name: (g, m) for name, g, m in rows}


_80 = _profiles(("1g.10gb", 1, 1), ("1g.20gb", 1, 2), ("2g.20gb", 2, 2), ("3g.40gb", 3, 4), ("4g.40gb", 4, 4))
PARTS: Mapping[str, Part] = {
    p.name: p
    for p in (
        Part(
            "A100-40GB",
            40,
            7,
            8,
            _profiles(
                ("1g.5gb", 1, 1),
                ("1g.10gb", 1, 2),
                ("2g.10gb", 2, 2),
                ("3g.20gb", 3, 4),
                ("4g.20gb", 4, 4),
                ("7g.40gb", 7, 8),
            ),
        ),
        Part("A100-80GB", 80, 7, 8, {**_80, "7g.80gb": (7, 8)}),
        Part("H100-80GB", 80, 7, 8, {**_80, "7g.80gb": (7, 8)}),
        Part(
            "H100-94GB",
            94,
            7,
            8,
            _profiles(
                ("1g.12gb", 1, 1),
                ("1g.24gb", 1, 2),
                ("2g.24gb", 2, 2),
                ("3g.47gb", 3, 4),
                ("4g.47gb", 4, 4),
                ("7g.94gb", 7, 8),
            ),
        ),
        Part(
            "H200-141GB",
            141,
            7,
            8,
            _profiles(
                ("1g.18gb", 1, 1),
                ("1g.35gb", 1, 2),
                ("2g.35gb", 2, 2),
                ("3g.71gb", 3, 4),
                ("4g.71gb", 4, 4),
                ("7g.141gb", 7, 8),
            ),
        ),
        Part("A30-24GB", 24, 4, 4, _profiles(("1g.6gb", 1, 1), ("2g.12gb", 2, 2), ("4g.24gb", 4, 4))),
    )
}
"""The MIG profiles of NVIDIA's common parts (NVIDIA's MIG user guide, "Supported MIG profiles"; the
media-extension variants ``+me`` are left out: their resource names are not valid Kubernetes names)."""

_PROFILE_RE = re.compile(r"^[1-9]g\.[1-9][0-9]{0,3}gb$")


class SharingError(ValueError):
    """A flavor's sharing settings that cannot be counted; ``field`` names the setting, the text the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Profile:
    """One thing a shared flavor offers a pod: its resource name and its weight in GPU-equivalents."""

    name: str
    """``1g.10gb``, or ``shared`` for an MPS or time-sliced share."""
    resource: str
    weight: Fraction
    rule: str
    """How the weight was found, in words: ``max(compute 1/7, memory 1/8)`` or ``set by an operator``."""

    @property
    def per_gpu(self) -> int:
        """How many of it one GPU-equivalent holds (whole slices only)."""
        return int(1 / self.weight)

    @property
    def micro(self) -> int:
        """Its weight in millionths of a GPU-equivalent (:func:`micro`)."""
        return micro(self.weight)


def micro(weight: Fraction) -> int:
    """A weight in millionths, rounded down: what Kueue's transformation and job_submit.lua charge per slice, so
    that slices that fit an equivalent exactly (7 × 1/7) still fit it (and one more never does below some
    200,000 GPU-equivalents)."""
    return int(weight * MICRO)


@dataclass(frozen=True, slots=True)
class FlavorSharing:
    """A flavor's sharing contract and the profiles it offers (empty for ``whole``)."""

    sharing: Sharing = Sharing.WHOLE
    profiles: tuple[Profile, ...] = ()
    part: str = ""

    @property
    def shared(self) -> bool:
        return self.sharing is not Sharing.WHOLE

    def weights(self) -> dict[str, Fraction]:
        """Per resource name: GPU-equivalents per unit requested (a whole flavor: ``nvidia.com/gpu`` → 1)."""
        if not self.shared:
            return {GPU: Fraction(1)}
        return {p.resource: p.weight for p in self.profiles}

    def slices(self, equivalents: int) -> str:
        """``14 × 1g.10gb or 4 × 3g.40gb``: what ``equivalents`` hold, profile by profile (whole slices)."""
        if not self.shared:
            return f"{equivalents} GPUs"
        return " or ".join(f"{int(equivalents / p.weight)} × {p.name}" for p in self.profiles)


WHOLE = FlavorSharing()


def part_of(accelerator_model: str, memory_gb: int) -> Part | None:
    """The catalogue's part for a flavor's accelerator model and device memory (``NVIDIA H100 80GB HBM3``
    with 80 → H100-80GB); None when the catalogue has none."""
    model = accelerator_model.upper().replace("-", " ")
    for part in PARTS.values():
        family = part.name.split("-")[0]
        if re.search(rf"\b{family}\b", model) and part.memory_gb == memory_gb:
            return part
    return None


def parse_weight(raw: object, field: str) -> Fraction:
    """An operator's weight: ``1/7``, ``0.25`` or ``1``; more than 0 and at most 1."""
    try:
        weight = Fraction(str(raw).strip())
    except (ValueError, ZeroDivisionError):
        raise SharingError(
            field, f"{raw!r} is not a weight: give a fraction such as 1/7 or a decimal such as 0.25"
        ) from None
    if not 0 < weight <= 1:
        raise SharingError(field, f"{raw!r}: a slice weighs more than 0 and at most 1 GPU-equivalent")
    if weight * MICRO < 1:
        raise SharingError(field, f"{raw!r}: at least 1/1000000 of a GPU (Kueue counts quantities in millionths)")
    return weight


def weight_of(part: Part, profile: str) -> tuple[Fraction, str]:
    """A catalogue profile's weight by the rule above, and the rule in words."""
    g, m = part.profiles[profile]
    compute, memory = Fraction(g, part.compute_slices), Fraction(m, part.memory_slices)
    return max(compute, memory), f"max(compute {compute}, memory {memory})"


def flavor_sharing(
    sharing: str,
    *,
    accelerator_model: str = "",
    memory_gb: int = 0,
    profiles: Sequence[str] = (),
    weights: Mapping[str, object] | None = None,
    shares: int = 1,
) -> FlavorSharing:
    """A flavor's sharing from its settings, or :class:`SharingError` naming the setting and the fix.

    ``profiles``: the MIG profiles its nodes are partitioned into (empty: every profile of its part);
    ``weights``: an operator's weight per profile (required for a profile the catalogue lacks);
    ``shares``: MPS or time-slicing shares per device."""
    try:
        mode = Sharing(sharing)
    except ValueError:
        raise SharingError("sharing", f"{sharing!r}: use one of {', '.join(s.value for s in Sharing)}") from None
    weights = dict(weights or {})
    if mode in (Sharing.WHOLE, Sharing.MIG) and shares != 1:
        raise SharingError("shares", f"{shares} shares per device: only MPS and time-slicing share devices; give 1")
    if mode is Sharing.WHOLE:
        if profiles or weights:
            raise SharingError(
                "mig_profiles", "whole devices offer no profiles: set sharing to mig to offer MIG slices"
            )
        return WHOLE
    if mode in (Sharing.MPS, Sharing.TIME_SLICING):
        if profiles:
            raise SharingError("mig_profiles", f"{mode.value} shares devices without profiles: leave profiles empty")
        if not 2 <= shares <= MAX_SHARES:
            raise SharingError(
                "shares", f"{shares}: give the device plugin's replicas per GPU, 2 to {MAX_SHARES} (e.g. 4)"
            )
        weight = Fraction(1, shares)
        profile = Profile("shared", SHARED_GPU, weight, f"1 of {shares} shares per device")
        return FlavorSharing(mode, (profile,))
    return _mig(accelerator_model, memory_gb, profiles, weights)


def _mig(model: str, memory_gb: int, names: Sequence[str], weights: dict[str, object]) -> FlavorSharing:
    part = part_of(model, memory_gb)
    if not names and part is None:
        known = ", ".join(PARTS)
        raise SharingError(
            "mig_profiles",
            f"Allot has no MIG profiles for {model!r} with {memory_gb} GB ({known}): list the profiles its "
            "nodes offer, each with its weight",
        )
    chosen = list(names) if names else list(part.profiles if part else ())
    if len(set(chosen)) != len(chosen):
        raise SharingError("mig_profiles", "a profile is listed twice: list each once")
    unknown = sorted(set(weights) - set(chosen))
    if unknown:
        raise SharingError("profile_weights", f"weights for {', '.join(unknown)}, which the flavor does not offer")
    found = []
    for name in chosen:
        if not _PROFILE_RE.match(name):
            raise SharingError("mig_profiles", f"{name!r} is not a MIG profile name: give e.g. 1g.10gb")
        if name in weights:
            weight, rule = parse_weight(weights[name], f"profile_weights.{name}"), "set by an operator"
        elif part is not None and name in part.profiles:
            weight, rule = weight_of(part, name)
        else:
            offered = ", ".join(part.profiles) if part else "none known"
            raise SharingError(
                "profile_weights",
                f"{name} is not a profile of {part.name if part else model!r} ({offered}): give its weight, e.g. "
                f'{{"{name}": "1/7"}}',
            )
        found.append(Profile(name, MIG_PREFIX + name, weight, rule))
    found.sort(key=lambda p: (p.weight, p.name))
    return FlavorSharing(Sharing.MIG, tuple(found), part.name if part else "")


def equivalents(counts: Mapping[str, int], weights: Mapping[str, Fraction]) -> Fraction:
    """Requests per resource name, in GPU-equivalents by ``weights`` (a resource not in it counts 0)."""
    return sum((Fraction(n) * weights.get(name, Fraction(0)) for name, n in counts.items()), Fraction(0))


def show(value: Fraction | int) -> str:
    """GPU-equivalents as people read them: ``2``, ``1.14``, ``0.5``."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def conflicts(flavors: Mapping[str, FlavorSharing]) -> list[str]:
    """On one cluster, resources that two flavors count at different weights (Kueue's transformation and the
    webhook's count are per resource name, for the whole cluster): one line each, naming both."""
    seen: dict[str, tuple[str, Fraction]] = {}
    found = []
    for name, spec in sorted(flavors.items()):
        for profile in spec.profiles:
            other = seen.setdefault(profile.resource, (name, profile.weight))
            if other[1] != profile.weight:
                found.append(
                    f"{profile.resource} weighs {other[1]} on {other[0]} but {profile.weight} on {name}: give "
                    "the profile one weight on the cluster"
                )
    return found
