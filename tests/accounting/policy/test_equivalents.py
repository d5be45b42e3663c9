"""GPU-equivalents held on a shared flavor (issue #45.5), in the pure core: a Kueue Workload's slices counted from
its pod sets, weighed with the flavor's exact weights; a MIG instance's DCGM series names its profile."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

from accounting.policy.dcgm import owner_of
from accounting.policy.equivalents import held, pod_slices, share, workload_slices
from accounting.policy.kueue import admitted_devices, observe
from quotas.policy.sharing import EQUIVALENTS, flavor_sharing

H100_MIG = flavor_sharing("mig", accelerator_model="NVIDIA H100 80GB HBM3", memory_gb=80, profiles=(), weights={})
T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)


def container(requests=None, limits=None):
    return {"name": "c", "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}


def workload(pod_sets, usage, flavor="h100-mig"):
    """A Workload as the real Kueue v0.13 shows one of slices (tests/quotas/test_slices_real.py): its admission
    in the currency alone, the pod sets asking for the slices."""
    return {
        "metadata": {"uid": "u-1", "name": "job-seven-1a2b3", "namespace": "infer"},
        "spec": {"podSets": pod_sets},
        "status": {
            "conditions": [
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "lastTransitionTime": "2026-12-01T09:00:00Z",
                }
            ],
            "admission": {
                "clusterQueue": "acme.infer",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": 7,
                        "flavors": {EQUIVALENTS: flavor},
                        "resourceUsage": {EQUIVALENTS: usage},
                    }
                ],
            },
        },
    }


def test_a_pods_slices_are_its_containers_requests_or_limits_and_an_init_container_if_larger():
    spec = {
        "containers": [
            container(requests={"nvidia.com/mig-1g.10gb": "1", "cpu": "2"}),
            container(limits={"nvidia.com/mig-1g.10gb": "2"}),  # the API server defaults the request to it
        ],
        "initContainers": [container(requests={"nvidia.com/mig-1g.10gb": "4", "nvidia.com/mig-3g.40gb": "1"})],
    }
    assert pod_slices(spec) == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 1}
    assert pod_slices({"containers": [container(requests={"nvidia.com/gpu": "2"})]}) == {}


def test_a_sidecars_slice_is_held_beside_the_apps_as_admission_counts_it():
    """A native sidecar (an init container with restartPolicy Always) keeps running: its slice is held with the
    app's, as the webhook judged the pod (quotas.policy.pods) — not the larger of the two."""
    sidecar = {**container(requests={"nvidia.com/mig-1g.10gb": "1"}), "restartPolicy": "Always"}
    spec = {
        "initContainers": [sidecar, container(requests={"nvidia.com/mig-1g.10gb": "2"})],
        "containers": [container(requests={"nvidia.com/mig-1g.10gb": "2"})],
    }
    assert pod_slices(spec) == {"nvidia.com/mig-1g.10gb": 3}  # 2 + the sidecar's 1; the init's 2 + 1 is no more


def test_a_workloads_slices_are_each_pod_sets_count_times_one_pods():
    pod_sets = [
        {
            "name": "main",
            "count": 7,
            "template": {"spec": {"containers": [container({"nvidia.com/mig-1g.10gb": "1"})]}},
        },
        {
            "name": "side",
            "count": 2,
            "template": {"spec": {"containers": [container({"nvidia.com/mig-3g.40gb": "1"})]}},
        },
    ]
    assert workload_slices({"spec": {"podSets": pod_sets}}) == {
        "nvidia.com/mig-1g.10gb": 7,
        "nvidia.com/mig-3g.40gb": 2,
    }


def test_slices_weigh_their_profiles_exactly_and_a_whole_flavor_holds_its_devices():
    assert held({"nvidia.com/mig-1g.10gb": 7}, H100_MIG) == 1.0  # 7 × 1/7, not Kueue's 0.999999
    assert held({"nvidia.com/mig-1g.10gb": "4", "nvidia.com/mig-3g.40gb": "1", "cpu": "8"}, H100_MIG) == float(
        Fraction(4, 7) + Fraction(1, 2)
    )
    assert held({"nvidia.com/gpu": 8}, flavor_sharing("whole", accelerator_model="A100", memory_gb=80)) is None
    assert share(1.0, 7, 7) == 1.0 and share(1.5, 3, 1) == 0.5 and share(None, 3, 1) is None


def test_a_kueue_workload_of_slices_counts_its_slices_on_the_flavor_of_the_currency():
    pod_sets = [
        {"name": "main", "count": 7, "template": {"spec": {"containers": [container({"nvidia.com/mig-1g.10gb": "1"})]}}}
    ]
    obj = workload(pod_sets, "999999")
    assigned = admitted_devices(obj, {"nvidia.com/gpu": None})
    assert assigned is not None
    flavor, devices, resources = assigned
    assert (flavor, devices) == ("h100-mig", 7)  # before: 0 devices on no flavor
    assert resources == {EQUIVALENTS: "999999", "nvidia.com/mig-1g.10gb": "7"}
    track = observe(None, obj, accelerators={"nvidia.com/gpu": None}, seen_at=T0)
    assert (track.flavor, track.devices, track.runs[0].devices) == ("h100-mig", 7, 7)
    assert held(track.resources, H100_MIG) == 1.0


def test_slices_kueue_counts_as_themselves_without_a_transformation_are_counted_too():
    pod_sets = [
        {"name": "main", "count": 2, "template": {"spec": {"containers": [container({"nvidia.com/mig-3g.40gb": "1"})]}}}
    ]
    obj = workload(pod_sets, "2")
    assignment = obj["status"]["admission"]["podSetAssignments"][0]
    assignment["flavors"] = {"nvidia.com/mig-3g.40gb": "h100-mig"}
    assignment["resourceUsage"] = {"nvidia.com/mig-3g.40gb": "2"}
    assigned = admitted_devices(obj, {"nvidia.com/gpu": None})
    assert assigned == ("h100-mig", 2, {"nvidia.com/mig-3g.40gb": "2"})
    assert held(assigned[2], H100_MIG) == 1.0


def test_a_mig_instances_series_names_its_profile():
    labels = {  # tests/fixtures/usage/dcgm/exposition-excerpts-from-issues.prom, as the exporter printed it
        "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3", "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "7",
        "namespace": "model-playground-stg", "pod": "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl",
    }  # fmt: skip
    owner = owner_of(labels)
    assert (owner.namespace, owner.profile) == ("model-playground-stg", "1g.10gb")
    assert owner_of({**labels, "GPU_I_PROFILE": ""}).profile == ""
