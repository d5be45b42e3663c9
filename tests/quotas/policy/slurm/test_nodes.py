"""What a whole-node job is given, per partition, read from slurmctld's own inventory (issue #41)."""
# ruff: noqa: E501  (scontrol prints one line a record)

from __future__ import annotations

from quotas.policy.slurm.nodes import inventory_digest, partition_gpus

# scontrol show node -o / show partition -o as Slurm 22.05 prints them (the local stack's gpu01, trimmed),
# plus a smaller node in two partitions and a CPU node
NODES = """\
NodeName=gpu01 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=16 Gres=gpu:a100:8,gpu:h100:8 State=IDLE Partitions=gpu,big CfgTRES=cpu=16,mem=16000M,billing=179,gres/gpu=16,gres/gpu:a100=8,gres/gpu:h100=8 AllocTRES=
NodeName=gpu02 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=16 Gres=gpu:a100:4 State=IDLE Partitions=gpu CfgTRES=cpu=16,mem=16000M,gres/gpu=4,gres/gpu:a100=4 AllocTRES=
NodeName=cpu01 Arch=x86_64 CPUTot=64 State=IDLE Partitions=cpu CfgTRES=cpu=64,mem=256000M AllocTRES=
"""
PARTITIONS = """\
PartitionName=gpu AllowGroups=ALL Default=YES Nodes=gpu[01-02] OverSubscribe=NO State=UP TotalNodes=2
PartitionName=big AllowGroups=ALL Default=NO Nodes=gpu01 OverSubscribe=EXCLUSIVE State=UP TotalNodes=1
PartitionName=cpu AllowGroups=ALL Default=NO Nodes=cpu01 OverSubscribe=FORCE:4 State=UP TotalNodes=1
"""


def test_each_partition_counts_the_gpus_of_its_smallest_node_and_says_whether_jobs_get_whole_nodes():
    found = partition_gpus(NODES, PARTITIONS)
    assert found == {
        "default_partition": "gpu",
        "partitions": {
            # gpu02 has no H100: an exclusive job there holds 4 A100 and nothing else (the least it can be given)
            "gpu": {"node_gpus": {"a100": 4}, "exclusive": False},
            "big": {"node_gpus": {"a100": 8, "h100": 8}, "exclusive": True},
            "cpu": {"node_gpus": {}, "exclusive": False},
        },
    }


def test_a_node_the_partition_list_lacks_still_counts_and_the_digest_follows_the_inventory():
    found = partition_gpus(NODES, "")
    assert found["default_partition"] is None
    assert found["partitions"]["big"] == {"node_gpus": {"a100": 8, "h100": 8}, "exclusive": False}
    bigger = partition_gpus(NODES.replace("gres/gpu:a100=4", "gres/gpu:a100=6"), PARTITIONS)
    assert bigger["partitions"]["gpu"]["node_gpus"] == {"a100": 6}
    assert inventory_digest(bigger) != inventory_digest(partition_gpus(NODES, PARTITIONS))
    assert inventory_digest(partition_gpus(NODES, PARTITIONS)) == inventory_digest(partition_gpus(NODES, PARTITIONS))
