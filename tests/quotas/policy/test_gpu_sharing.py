"""GPU-equivalents for MIG slices and shared GPUs (issue #45.1, 45.3): the catalogue, the weight rule, an
operator's overrides, the errors that name the setting, and the Kueue objects and configuration."""

from fractions import Fraction

import pytest

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.kueue.config import kueue_configuration
from quotas.policy.kueue.validate import validate_objects
from quotas.policy.sharing import (
    EQUIVALENTS,
    PARTS,
    Sharing,
    SharingError,
    conflicts,
    equivalents,
    flavor_sharing,
    part_of,
    show,
)

GPU = Resource.GPU
H100 = "NVIDIA H100 80GB HBM3"


def test_the_rule_takes_the_larger_of_compute_and_memory_share():
    mig = flavor_sharing("mig", accelerator_model=H100, memory_gb=80)
    weights = {p.name: p.weight for p in mig.profiles}
    assert weights == {
        "1g.10gb": Fraction(1, 7),  # compute 1/7 > memory 1/8
        "1g.20gb": Fraction(1, 4),  # memory 2/8 > compute 1/7
        "2g.20gb": Fraction(2, 7),
        "3g.40gb": Fraction(1, 2),  # memory 4/8 > compute 3/7
        "4g.40gb": Fraction(4, 7),
        "7g.80gb": Fraction(1),
    }
    assert mig.part == "H100-80GB"
    assert next(p for p in mig.profiles if p.name == "1g.10gb").rule == "max(compute 1/7, memory 1/8)"
    assert [p.resource for p in mig.profiles][:2] == ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.20gb"]


@pytest.mark.parametrize("part", sorted(PARTS))
def test_no_slices_weighing_one_hold_more_than_a_device(part):
    """The rule's promise: slices that weigh N never hold more compute or memory than N devices have, so a
    quota in equivalents never promises more than the pool."""
    p = PARTS[part]
    for name, (g, m) in p.profiles.items():
        mig = flavor_sharing("mig", accelerator_model=f"NVIDIA {part.split('-')[0]}", memory_gb=p.memory_gb)
        weight = next(x.weight for x in mig.profiles if x.name == name)
        per_device = int(1 / weight)  # as many as one equivalent holds
        assert per_device * g <= p.compute_slices and per_device * m <= p.memory_slices, name
        assert weight <= 1


def test_parts_are_found_by_model_and_memory():
    assert part_of("NVIDIA A100-SXM4-80GB", 80) == PARTS["A100-80GB"]
    assert part_of("NVIDIA A100-SXM4-40GB", 40) == PARTS["A100-40GB"]
    assert part_of("NVIDIA H100 NVL", 94) == PARTS["H100-94GB"]
    assert part_of("NVIDIA H200", 141) == PARTS["H200-141GB"]
    assert part_of("NVIDIA L40S", 48) is None
    assert part_of("NVIDIA A100-PCIE", 24) is None  # no A100 has 24 GB: not mistaken for an A30


def test_an_operator_chooses_the_layout_and_overrides_weights():
    mig = flavor_sharing(
        "mig", accelerator_model=H100, memory_gb=80, profiles=["3g.40gb", "1g.10gb"], weights={"3g.40gb": "3/7"}
    )
    assert [(p.name, p.weight, p.rule) for p in mig.profiles] == [
        ("1g.10gb", Fraction(1, 7), "max(compute 1/7, memory 1/8)"),
        ("3g.40gb", Fraction(3, 7), "set by an operator"),
    ]
    assert mig.slices(2) == "14 × 1g.10gb or 4 × 3g.40gb"
    # a part Allot has no figures for: every profile needs its weight
    b200 = flavor_sharing(
        "mig", accelerator_model="NVIDIA B200", memory_gb=180, profiles=["1g.23gb"], weights={"1g.23gb": "0.125"}
    )
    assert b200.weights() == {"nvidia.com/mig-1g.23gb": Fraction(1, 8)}


@pytest.mark.parametrize(
    ("settings", "field", "says"),
    [
        ({"sharing": "fractional"}, "sharing", "use one of whole, mig, mps, time-slicing"),
        ({"sharing": "whole", "profiles": ["1g.10gb"]}, "mig_profiles", "set sharing to mig"),
        ({"sharing": "mig", "accelerator_model": "NVIDIA L40S", "memory_gb": 48}, "mig_profiles", "list the profiles"),
        (
            {"sharing": "mig", "profiles": ["1g.5gb"]},
            "profile_weights",
            "is not a profile of 'H100-80GB' (1g.10gb, 1g.20gb",
        ),
        ({"sharing": "mig", "profiles": ["big"]}, "mig_profiles", "is not a MIG profile name: give e.g. 1g.10gb"),
        ({"sharing": "mig", "profiles": ["1g.10gb", "1g.10gb"]}, "mig_profiles", "listed twice"),
        ({"sharing": "mig", "weights": {"9g.90gb": "1"}}, "profile_weights", "which the flavor does not offer"),
        ({"sharing": "mig", "weights": {"1g.10gb": "2"}}, "profile_weights.1g.10gb", "at most 1 GPU-equivalent"),
        (
            {"sharing": "mig", "weights": {"1g.10gb": "a seventh"}},
            "profile_weights.1g.10gb",
            "give a fraction such as 1/7",
        ),
        ({"sharing": "time-slicing", "shares": 1}, "shares", "replicas per GPU, 2 to 64"),
        ({"sharing": "mig", "shares": 4}, "shares", "only MPS and time-slicing"),
    ],
)
def test_bad_settings_name_the_setting_and_the_fix(settings, field, says):
    settings = {"accelerator_model": H100, "memory_gb": 80, **settings}
    with pytest.raises(SharingError) as caught:
        flavor_sharing(settings.pop("sharing"), **settings)
    assert caught.value.field == field
    assert says in caught.value.message


def test_shared_devices_weigh_one_share_and_say_what_they_isolate():
    sliced = flavor_sharing("time-slicing", shares=4)
    assert sliced.weights() == {"nvidia.com/gpu.shared": Fraction(1, 4)}
    assert "nothing is isolated" in sliced.sharing.isolation
    assert "memory and faults are shared" in Sharing.MPS.isolation
    assert flavor_sharing("whole").weights() == {"nvidia.com/gpu": 1}


def test_equivalents_count_slices_by_weight_and_show_them_briefly():
    weights = flavor_sharing("mig", accelerator_model=H100, memory_gb=80).weights()
    wanted = equivalents({"nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-3g.40gb": 1, "cpu": 4}, weights)
    assert wanted == Fraction(8, 7) + Fraction(1, 2)
    assert show(wanted) == "1.64"
    assert show(Fraction(2)) == "2"
    assert show(Fraction(1, 2)) == "0.5"


def test_one_resource_has_one_weight_on_a_cluster():
    a = flavor_sharing("mig", accelerator_model=H100, memory_gb=80)
    b = flavor_sharing("mig", accelerator_model="NVIDIA A100-SXM4-80GB", memory_gb=80)
    assert conflicts({"h100": a, "a100": b}) == []  # the same profiles, the same weights
    c = flavor_sharing("mig", accelerator_model=H100, memory_gb=80, weights={"3g.40gb": "3/7"})
    [clash] = conflicts({"h100": a, "h100-compute": c})
    assert clash.startswith("nvidia.com/mig-3g.40gb weighs 1/2 on h100 but 3/7 on h100-compute")


def _mig_tree():
    b = TreeBuilder()
    b.flavor("west/a100", 8)
    b.flavor("west/h100-mig", 2)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    infer = b.unit("infer", UnitKind.TEAM, acme)
    train = b.unit("train", UnitKind.TEAM, acme)
    b.quota(acme, "west/a100", GPU, 8)
    b.quota(acme, "west/h100-mig", GPU, 2)
    b.quota(infer, "west/h100-mig", GPU, 1, 1, lendable=1)
    b.quota(train, "west/a100", GPU, 8)
    mig = flavor_sharing("mig", accelerator_model=H100, memory_gb=80, profiles=["1g.10gb", "3g.40gb"])
    target = KueueTarget(
        "west",
        (KueueFlavor("west/a100", "a100"), KueueFlavor("west/h100-mig", "h100-mig", sharing=mig)),
        namespaces={infer: ("infer",), train: ("train",)},
    )
    return b.build(), target, mig


def test_a_mig_flavor_compiles_to_one_currency_its_slices_are_transformed_into(crd_schemas):
    snapshot, target, mig = _mig_tree()
    objects = compile_kueue(snapshot, target)
    queues = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterQueue"}
    [group] = queues["acme.infer"]["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", EQUIVALENTS]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert flavors["h100-mig"][EQUIVALENTS] == {
        "name": EQUIVALENTS,
        "nominalQuota": "1M",  # a million millionths, as Kubernetes prints it
        "borrowingLimit": "1M",
        "lendingLimit": "1M",
    }
    assert flavors["h100-mig"]["nvidia.com/gpu"]["nominalQuota"] == "0"  # no whole GPUs on a MIG flavor
    assert flavors["h100-mig"]["nvidia.com/gpu"]["borrowingLimit"] == "0"
    train = {
        f["name"]: {r["name"]: r for r in f["resources"]}
        for f in queues["acme.train"]["spec"]["resourceGroups"][0]["flavors"]
    }
    assert train["a100"]["nvidia.com/gpu"]["nominalQuota"] == "8"
    assert train["a100"][EQUIVALENTS]["nominalQuota"] == "0"
    [cohort] = [o for o in objects if o["kind"] == "Cohort"]
    root = {
        f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
        for f in cohort["spec"]["resourceGroups"][0]["flavors"]
    }
    assert root["h100-mig"] == {"nvidia.com/gpu": "0", EQUIVALENTS: "1M"}  # the residual 2 − 1
    assert validate_objects(objects, crd_schemas) == []
    config = kueue_configuration("classic", version="v1beta1", profiles=mig.profiles)
    assert config["resources"]["transformations"] == [
        {"input": "nvidia.com/mig-1g.10gb", "strategy": "Replace", "outputs": {EQUIVALENTS: "142857"}},
        {"input": "nvidia.com/mig-3g.40gb", "strategy": "Replace", "outputs": {EQUIVALENTS: "500000"}},
    ]
    assert "resources" not in kueue_configuration("classic")  # no shared flavor, nothing to transform


def test_a_cluster_of_whole_flavors_compiles_as_before():
    snapshot, target, _ = _mig_tree()
    whole = KueueTarget("west", (KueueFlavor("west/a100", "a100"),), namespaces=target.namespaces)
    for queue in (o for o in compile_kueue(snapshot, whole) if o["kind"] == "ClusterQueue"):
        for group in queue["spec"].get("resourceGroups", []):
            assert group["coveredResources"] == ["nvidia.com/gpu"]


def test_an_import_reads_a_shared_flavors_currency_back_as_its_gpu_equivalents():
    from quotas.policy.kueue.convert import to_version
    from quotas.policy.kueue.importer import read_kueue

    snapshot, target, _ = _mig_tree()
    plan = read_kueue([to_version(o, "v1beta1") for o in compile_kueue(snapshot, target)])
    infer = plan.units["acme.infer"]
    assert infer.quotas[("h100-mig", GPU)] == [1, 1, 1]
    train = plan.units["acme.train"]
    assert train.quotas[("a100", GPU)] == [8, 0, 0]
    assert train.quotas[("h100-mig", GPU)] == [0, 0, 0]  # the MIG flavor's nvidia.com/gpu 0, its currency 0


def test_the_currency_is_written_as_kubernetes_prints_it():
    from quotas.policy.kueue.target import decimal_si

    assert [decimal_si(v) for v in (0, 7, 142857, 500000, 1000000, 2500000, 10**9, 1500 * 10**6)] == [
        "0",
        "7",
        "142857",
        "500k",
        "1M",
        "2500k",
        "1G",
        "1500M",
    ]


def test_an_empty_map_the_api_server_does_not_keep_is_not_a_change():
    """Found on the real API server: a flavor with no node labels was rewritten by every sync."""
    from quotas.policy.kueue.diff import diff_object

    desired = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a"}}
    assert diff_object({**desired, "spec": {"nodeLabels": {}}}, {**desired, "spec": {}}) == []
    assert diff_object({**desired, "spec": {"nodeLabels": {"g": "a"}}}, {**desired, "spec": {}}) != []


def test_a_fleet_managers_flavor_stays_shared():
    """A MultiKueue manager sums its workers' queues: a MIG flavor's quota stays in the currency there too."""
    from quotas.policy.kueue.multikueue import Fleet, Worker, manager_flavors

    _, target, mig = _mig_tree()
    fleet = Fleet("f", "hub", (Worker("west", "west-kubeconfig"),))
    flavors = {f.name: f for f in manager_flavors(fleet, {"west": target})}
    assert flavors["h100-mig"].sharing == mig and flavors["h100-mig"].key == "hub/h100-mig"
    assert not flavors["a100"].sharing.shared


def test_a_kueue_configuration_is_checked_for_the_transformations_slices_need():
    """A sync reads the cluster's own Kueue configuration and says whether it counts slices by weight: Allot's
    served configuration does; one without a profile's transformation, keeping the slice (Retain), or with
    another weight does not, each said naming the resource."""
    import yaml

    from quotas.policy.kueue.config import transformation_problems

    mig = flavor_sharing(
        "mig", accelerator_model="NVIDIA H100 80GB HBM3", memory_gb=80, profiles=("1g.10gb", "3g.40gb")
    )
    served = kueue_configuration("classic", version="v1beta1", profiles=mig.profiles)
    assert transformation_problems(yaml.safe_dump(served), mig.profiles) == []
    site = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "resources": {"transformations": [
        {"input": "nvidia.com/mig-1g.10gb", "strategy": "Retain", "outputs": {EQUIVALENTS: "142857"}},
        {"input": "nvidia.com/mig-3g.40gb", "strategy": "Replace", "outputs": {EQUIVALENTS: "428571"}},
    ]}}  # fmt: skip
    assert transformation_problems(yaml.safe_dump(site), mig.profiles) == [
        "nvidia.com/mig-1g.10gb is kept beside its weight (strategy Retain, not Replace)",
        f"nvidia.com/mig-3g.40gb becomes {{'{EQUIVALENTS}': '428571'}}, Allot counts it {{'{EQUIVALENTS}': '500000'}}",
    ]
    bare = transformation_problems("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n", mig.profiles)
    assert bare == [
        "nvidia.com/mig-1g.10gb is not transformed (Kueue counts it as a resource the queues do not cover)",
        "nvidia.com/mig-3g.40gb is not transformed (Kueue counts it as a resource the queues do not cover)",
    ]
    assert transformation_problems("resources: [", mig.profiles)[0].startswith("its configuration is not YAML")
