"""MIG slices on Slurm (quotas.policy.sharing): each profile of a MIG flavor is a typed GPU GRES of its own.

Slurm counts a MIG slice as one GPU of its type, ``gres/gpu:<flavor>_<profile>`` (``h100-mig_1g.10gb``: the
flavor's name, then the profile, so two MIG pools never share a type), and as one ``gres/gpu`` — there is
no GRES whose count is a weight. So a unit's GPU-equivalents become, per profile, the whole slices they hold
(:func:`slices`): Slurm's QOS limits hold each profile to what the equivalents hold *of that profile alone*;
a mix of profiles is held to the equivalents by ``job_submit.lua`` per job (the snapshot's ``weights``), not
across running jobs (the coverage report says so). ``TRESBillingWeights`` charge each profile its weight,
so billing and fair-share count GPU-equivalents. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction


def gres_types(gpu_type: str, profiles: Sequence[tuple[str, Fraction]]) -> tuple[tuple[str, Fraction], ...]:
    """A flavor's GPU GRES types and each one's weight: its own type at 1 for whole devices, one type per
    profile for a MIG flavor."""
    if not profiles:
        return ((gpu_type, Fraction(1)),)
    return tuple((f"{gpu_type}_{name}", weight) for name, weight in profiles)


def slices(equivalents: int, weight: Fraction) -> int:
    """The whole slices of ``weight`` that ``equivalents`` hold."""
    return int(Fraction(equivalents) / weight)


def billing(gpu_type: str, profiles: Sequence[tuple[str, Fraction]], billing_weight: float) -> str:
    """The partition's ``TRESBillingWeights``: CPU and memory as for every partition, each GPU type its weight
    in GPU-equivalents times the flavor's billing weight (× 10, as whole GPUs)."""
    gpus = ",".join(
        f"GRES/gpu:{gres}={float(weight) * billing_weight * 10:.6g}" for gres, weight in gres_types(gpu_type, profiles)
    )
    return f"CPU=1.0,Mem=0.25G,{gpus}"
