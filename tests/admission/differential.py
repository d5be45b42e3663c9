"""Admission, differentially: seeded Jobs through Allot's webhooks (mutating, then validating, as the API server
chains them) and through the real Kueue of tests/kube_cluster.py on an otherwise empty queue with quota to
spare — what the webhook allows must be admitted, what it refuses must be what Kueue never admits.

The flavors differ in their node-label keys on purpose (Kueue matches a pin on the keys of *every* flavor of
the resource group, so a flavor without a key fails a pin on it): two whole flavors named by
``allot.dev/flavor``, a tainted spot flavor, and a MIG flavor known only by the GPU operator's label. Cases
mix node selectors, required node affinity of every operator (ORed terms, keys no flavor carries), tolerations,
whole GPUs, MIG slices, both in one pod, no devices at all, and asks beyond the ceiling.

Used by tests/admission/test_admission_differential.py (a seeded subset in CI) and
bench/admission_differential.py (the long run, printing ``admission_disagreements=…``)."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonpatch

from admission.policy.decide import decide
from admission.policy.model import AdmissionPolicy, compile_policy
from quotas.policy import Resource
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.snapshot import Contract, Tier, UnitKind
from tests.kube_cluster import SHARED_FLAVORS, ControlPlane
from tests.kube_work import condition, gpu_job, namespace, wait_for, workloads

ORG = "pinmatch"
TEAM = "team"
NAMESPACE = f"{ORG}-{TEAM}"
QUEUE = f"{ORG}.{TEAM}"
LABELS = {
    "allot.dev/owner": "ann",
    "allot.dev/project": TEAM,
    "allot.dev/tier": "P1",
    "allot.dev/contract": "std",
    "kueue.x-k8s.io/queue-name": QUEUE,
}
SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
FLAVORS = (
    KueueFlavor(f"kube/{ORG}-a100", f"{ORG}-a100", {"allot.dev/flavor": "a100", "gpu.count": "8"}, order=0),
    KueueFlavor(
        f"kube/{ORG}-h100", f"{ORG}-h100", {"allot.dev/flavor": "h100", "gpu.count": "4", "zone": "b"}, order=1
    ),
    KueueFlavor(
        f"kube/{ORG}-spot",
        f"{ORG}-spot",
        {"allot.dev/flavor": "spot", "gpu.count": "2", "zone": "c"},
        node_taints=(SPOT_TAINT,),
        order=2,
    ),
    KueueFlavor(
        f"kube/{ORG}-mig",
        f"{ORG}-mig",
        {"nvidia.com/mig.strategy": "mixed"},
        sharing=SHARED_FLAVORS["h100-mig"],
        order=3,
    ),
)
CAPACITY = {f"kube/{ORG}-a100": 256, f"kube/{ORG}-h100": 128, f"kube/{ORG}-spot": 128, f"kube/{ORG}-mig": 64}
"""Far above what a batch of cases asks at once: a case that waits, waits for its match, never for quota."""
SLICES = ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb")
VALUES = {
    "allot.dev/flavor": ("a100", "h100", "spot", "mig", "h100-mig"),
    "gpu.count": ("2", "4", "8", "x"),
    "zone": ("b", "c", "d"),
    "nvidia.com/mig.strategy": ("mixed", "single"),
    "kubernetes.io/arch": ("amd64",),  # a key no flavor carries: the node scheduler's, never Kueue's
}
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def setup(plane: ControlPlane) -> AdmissionPolicy:
    """The org's one team on the plane (its flavors, cohort, ClusterQueue, LocalQueue) and the admission policy
    the webhook judges it by, both compiled from one snapshot."""
    from tests.quotas.test_kube_real import active, apply_tree

    b = TreeBuilder()
    for key, n in CAPACITY.items():
        b.flavor(key, n)
    b.contracts["std"] = Contract("std", 300, 30)
    b.tiers["P1"] = Tier("P1", 10000, False)
    root = b.unit(ORG, UnitKind.ORGANISATION, contract="std")
    team = b.unit(TEAM, UnitKind.TEAM, root)
    for key, n in CAPACITY.items():
        b.quota(root, key, Resource.GPU, n)
        b.quota(team, key, Resource.GPU, n)
    target = KueueTarget("kube", FLAVORS, namespaces={team: (NAMESPACE,)})
    snapshot = b.build()
    namespace(plane, NAMESPACE)
    apply_tree(plane, compile_kueue(snapshot, target))
    active(plane, [QUEUE])
    return compile_policy(snapshot, target, members={team: frozenset({"ann"})}, allowed_tiers={}, flavor_memory={})


@dataclass(frozen=True)
class Case:
    name: str
    job: dict[str, Any]
    """The Job as the user writes it (before the mutating webhook)."""
    what: str
    """The case in words, for a disagreement's line."""


def cases(seed: int, count: int) -> Iterator[Case]:
    """``count`` seeded Jobs, named ``c<seed>-<i>``."""
    rng = random.Random(seed)
    for i in range(count):
        yield _case(rng, f"c{seed}-{i}")


def _case(rng: random.Random, name: str) -> Case:
    pod: dict[str, Any] = {}
    words = []
    if rng.random() < 0.5:
        keys = rng.sample(sorted(VALUES), rng.choice((1, 1, 2)))
        pod["nodeSelector"] = {k: rng.choice(VALUES[k]) for k in keys}
        words.append(f"selector {pod['nodeSelector']}")
    if rng.random() < 0.5:
        terms = [[_expression(rng) for _ in range(rng.choice((1, 1, 2)))] for _ in range(rng.choice((1, 1, 2)))]
        pod["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                }
            }
        }
        words.append("affinity " + " OR ".join(" and ".join(_said(e) for e in t) for t in terms))
    if rng.random() < 0.3:
        toleration = rng.choice(
            (
                {"key": "spot", "operator": "Exists"},
                {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                {"key": "spot", "operator": "Equal", "value": "false"},
                {"operator": "Exists"},
            )
        )
        pod["tolerations"] = [toleration]
        words.append(f"tolerates {toleration}")
    asks: dict[str, int] = {}
    pods = rng.choice((1, 1, 2))
    kind = rng.random()
    if kind < 0.45:
        asks["nvidia.com/gpu"] = rng.choice((1, 2))
    elif kind < 0.75:
        asks[rng.choice(SLICES)] = 1
    elif kind < 0.82:
        asks["nvidia.com/gpu"], asks[rng.choice(SLICES)] = 1, 1
    elif kind < 0.87:
        pass  # no devices: Kueue assigns no flavor, whatever the pins
    elif kind < 0.92:
        asks["nvidia.com/gpu"] = 0  # zero of a covered resource: matched against the flavors all the same
    else:
        asks["nvidia.com/gpu"], pods = 300, 1  # above every flavor's ceiling
    words.append(f"{pods} × {asks or 'no devices'}")
    job = gpu_job(name, NAMESPACE, QUEUE, 1, priority="allot-p1")
    job["metadata"]["labels"].update(LABELS)
    job["spec"]["parallelism"] = job["spec"]["completions"] = pods
    spec = job["spec"]["template"]["spec"]
    quantities = {k: str(v) for k, v in asks.items()}
    spec["containers"][0]["resources"] = {"requests": quantities, "limits": quantities} if asks else {}
    spec.update(pod)
    return Case(name, job, "; ".join(words))


def _expression(rng: random.Random) -> dict[str, Any]:
    key = rng.choice(sorted(VALUES))
    op = rng.choice(OPERATORS)
    if op in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": op}
    if op in ("Gt", "Lt"):
        return {"key": key, "operator": op, "values": [rng.choice(("1", "3", "4", "6", "9"))]}
    return {"key": key, "operator": op, "values": sorted(set(rng.sample(VALUES[key], min(2, len(VALUES[key])))))}


def _said(e: dict[str, Any]) -> str:
    return f"{e['key']} {e['operator']} {e.get('values', '')}".strip()


def _review(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "uid": "d",
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "namespace": NAMESPACE,
        "operation": "CREATE",
        "object": job,
    }


def webhook(policy: AdmissionPolicy, case: Case) -> tuple[bool, str, dict[str, Any]]:
    """(allowed, the reason and message, the Job as the API server stores it after the mutating webhook)."""
    job = copy.deepcopy(case.job)
    mutated = decide(policy, _review(copy.deepcopy(job)), mutate=True)
    if not mutated.allowed:
        return False, f"{mutated.reason}: {mutated.message}", job
    job = jsonpatch.apply_patch(job, list(mutated.patch))
    decision = decide(policy, _review(copy.deepcopy(job)))
    return decision.allowed, f"{decision.reason}: {decision.message}", job


def kueue_verdicts(plane: ControlPlane, names: list[str], seconds: float = 90) -> dict[str, tuple[bool, str]]:
    """Per Job: (admitted, Kueue's own word) once Kueue has decided on every one — admitted, or its QuotaReserved
    condition False with the scheduler's message (on a queue with quota to spare: it never fits)."""

    def decided() -> dict[str, tuple[bool, str]] | None:
        found = workloads(plane, NAMESPACE)
        out = {}
        for name in names:
            wl = found.get(name)
            if any((condition(wl, kind) or {}).get("status") == "True" for kind in ("Admitted", "QuotaReserved")):
                flavors = [a.get("flavors") for a in wl["status"]["admission"]["podSetAssignments"]]  # type: ignore[index]
                out[name] = (True, f"admitted on {flavors}")
                continue
            reserved = condition(wl, "QuotaReserved")
            if not reserved or not reserved.get("message"):
                return None
            out[name] = (False, reserved["message"])
        return out

    return wait_for(f"Kueue's verdict on {len(names)} jobs", decided, seconds, every=0.5)


@dataclass(frozen=True)
class Outcome:
    case: Case
    allowed: bool
    said: str
    admitted: bool
    kueue: str

    @property
    def agrees(self) -> bool:
        return self.allowed == self.admitted

    def line(self) -> str:
        side = "false allow" if self.allowed else "false refusal"
        return f"{side} {self.case.name} ({self.case.what}): webhook {self.said!r}; Kueue {self.kueue!r}"


def run(plane: ControlPlane, policy: AdmissionPolicy, batch: list[Case]) -> list[Outcome]:
    """One batch through both: each Job the webhook would let through created as it would be stored (refused
    ones as written — Kueue is asked what it would have done), Kueue's verdicts read, then all deleted."""
    from tests.kube_work import delete_jobs

    judged = {}
    try:
        for case in batch:
            allowed, said, job = webhook(policy, case)
            judged[case.name] = (allowed, said)
            plane.apply_manifest(job)
        verdicts = kueue_verdicts(plane, [c.name for c in batch])
    finally:
        delete_jobs(plane, NAMESPACE)
    return [Outcome(c, *judged[c.name], *verdicts[c.name]) for c in batch]
