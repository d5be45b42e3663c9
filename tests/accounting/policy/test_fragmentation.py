"""The fragmentation index: free GPUs no waiting shape can use, from real scontrol output and from
Kubernetes node and pod lists."""

from __future__ import annotations

from pathlib import Path

from accounting.policy.fragmentation import (
    NodeGpus,
    PendingShape,
    fragmentation,
    kube_inventory,
    parse_scontrol_nodes,
    parse_squeue_pending,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm-outputs"


def test_120_free_gpus_and_a_64_gpu_gang_that_cannot_start():
    # 20 nodes of 8 with 2 held on each: 120 free, none of them a whole node; the gang wants 8 × 8
    nodes = [NodeGpus(f"n{i:02d}", "a100", 8, 2) for i in range(20)]
    gang = PendingShape("job 812", "a100", 8, 8)
    found = fragmentation("a100", nodes, [gang])
    assert (found.free, found.usable, found.largest_block, found.whole_free_nodes) == (120, 0, 6, 0)
    assert found.index == 1.0 and found.waiting == ("job 812: 8 × 8 GPUs",) and found.fitting == 0
    small = fragmentation("a100", nodes, [gang, PendingShape("job 813", None, 4)])  # an untyped 4-GPU job
    assert small.usable == 80 and small.index == round(1 - 80 / 120, 3) and small.fitting == 1  # 4 of each 6
    quiet = fragmentation("a100", nodes, [])
    assert quiet.index == 0.0 and quiet.usable == 120  # nothing waits: nothing is stranded
    assert found.blocks == {6: 20}


def test_a_gang_counts_its_nodes_not_only_its_per_node_slots():
    """Issue #43: 5 whole free nodes and 30 nodes with one GPU free, an 8 × 8 gang waiting. Node by node
    the 40 GPUs on whole nodes looked usable (index 0.43); the gang needs 8 such nodes, so no free GPU
    can be allocated to what waits: 1.0, with the largest gang of 8 per node that could start (5)."""
    nodes = [NodeGpus(f"w{i}", "a100", 8, 0) for i in range(5)] + [
        NodeGpus(f"p{i:02d}", "a100", 8, 7) for i in range(30)
    ]
    gang = PendingShape("job 900", "a100", 8, 8)
    found = fragmentation("a100", nodes, [gang])
    assert (found.free, found.usable, found.whole_free_nodes, found.largest_block) == (70, 0, 5, 8)
    assert found.index == 1.0 and found.placeable == {8: 5} and found.waiting == ("job 900: 8 × 8 GPUs",)
    smaller = fragmentation("a100", nodes, [gang, PendingShape("job 901", "a100", 8, 4)])  # a 4 × 8 that starts
    assert smaller.usable == 40 and smaller.index == round(1 - 40 / 70, 3) and smaller.fitting == 1
    ones = fragmentation("a100", nodes, [gang, PendingShape("job 902", None, 1)])  # a 1-GPU job: every GPU
    assert ones.index == 0.0 and ones.placeable == {1: 70, 8: 5}


def test_a_drained_node_has_nothing_free_and_other_flavors_do_not_count():
    nodes = [NodeGpus("a", "a100", 8, 0, available=False), NodeGpus("b", "a100", 8, 0), NodeGpus("c", "h100", 8, 0)]
    found = fragmentation("a100", nodes, [PendingShape("job 1", "h100", 8)])
    assert (found.nodes, found.total, found.free, found.whole_free_nodes, found.pending_gpus) == (2, 16, 8, 1, 0)


def test_the_real_scontrol_output_per_gpu_type():
    (node,) = parse_scontrol_nodes((FIXTURES / "scontrol-show-node.txt").read_text())  # multi-line form
    assert node == NodeGpus("gpu01", "a100", 8, 0, True)
    one_line = (
        "NodeName=gpu01 Gres=gpu:a100:8,gpu:h100:8 State=MIXED CfgTRES=cpu=16,mem=16000M,billing=179,gres/gpu=16,"
        "gres/gpu:a100=8,gres/gpu:h100=8 AllocTRES=cpu=1,mem=1000M,gres/gpu=1,gres/gpu:a100=1\n"
        "NodeName=gpu02 State=DOWN+DRAIN CfgTRES=cpu=16,gres/gpu=8,gres/gpu:h100=8 AllocTRES=\n"
    )  # as slurmd 22.05 printed it for the local stack (`scontrol show node -o`)
    assert parse_scontrol_nodes(one_line) == [
        NodeGpus("gpu01", "a100", 8, 1, True),
        NodeGpus("gpu01", "h100", 8, 0, True),
        NodeGpus("gpu02", "h100", 8, 0, False),
    ]


def test_squeue_pending_shapes():
    text = "812|gres:gpu:a100:8|8\n813|gres:gpu:4|1\n814|N/A|1\n815|gres/gpu:h100=2|3\n"
    assert parse_squeue_pending(text) == [
        PendingShape("job 812", "a100", 8, 8),
        PendingShape("job 813", None, 4, 1),
        PendingShape("job 815", "h100", 2, 3),
    ]


def node(name, gpus, labels, ready=True, unschedulable=False):
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip


def pod(name, gpus, node_name=None, phase="Running", owner=None, selector=None):
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if selector:
        spec["nodeSelector"] = selector
    meta = {"name": name, "namespace": "team-a"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_kubernetes_nodes_and_pods_by_flavor_labels():
    flavors = {"a100-80gb": {"gpu": "a100-80gb"}, "v100": {"gpu": "v100"}}
    nodes = [
        node("n1", 8, {"gpu": "a100-80gb"}), node("n2", 8, {"gpu": "a100-80gb"}, unschedulable=True),
        node("n3", 4, {"gpu": "v100"}, ready=False), node("cpu", 0, {}),
    ]  # fmt: skip
    pods = [
        pod("p1", 6, "n1"), pod("done", 8, "n1", phase="Succeeded"),
        pod("w-0", 4, owner="train", selector={"gpu": "a100-80gb"}),
        pod("w-1", 4, owner="train", selector={"gpu": "a100-80gb"}),
        pod("solo", 1, phase="Pending"),
    ]  # fmt: skip
    inventory, shapes = kube_inventory(nodes, pods, flavors)
    assert inventory == [
        NodeGpus("n1", "a100-80gb", 8, 6, True),
        NodeGpus("n2", "a100-80gb", 8, 0, False),
        NodeGpus("n3", "v100", 4, 0, False),
    ]
    assert shapes == [PendingShape("team-a/solo", None, 1, 1), PendingShape("team-a/train", "a100-80gb", 4, 2)]
    found = fragmentation("a100-80gb", inventory, shapes)
    assert (found.free, found.usable, found.index) == (2, 2, 0.0)  # the 1-GPU pod can use them
    assert found.waiting == ("team-a/train: 2 × 4 GPUs",)
