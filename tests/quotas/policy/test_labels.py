"""Kubernetes label rules at input: what Kueue's ResourceFlavor webhook would refuse is refused first
(issue #15.6: a key 'bad key!', a 64-character value and 9 labels all reached the cluster)."""

from __future__ import annotations

from quotas.policy.labels import label_problems


def test_good_labels_pass() -> None:
    assert label_problems({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "", "a_b.c-d": "x"}) == []


def test_each_bad_label_is_named_with_its_rule() -> None:
    assert label_problems({"bad key!": "x"}) == [
        "label 'bad key!': name 'bad key!' must be 1 to 63 characters of letters, digits, '-', '_' or '.', "
        "beginning and ending with a letter or digit"
    ]
    (long,) = label_problems({"pool": "v" * 64})
    assert "must be at most 63 characters" in long
    (prefix,) = label_problems({"Nvidia.COM/gpu": "x"})
    assert "lowercase DNS subdomain" in prefix
    (count,) = label_problems({f"l{i}": "x" for i in range(9)})
    assert count == "9 labels: Kueue allows at most 8 node labels on a flavor"
    assert label_problems({"pool": 3}) == ["label 'pool': the value must be a string, e.g. \"true\""]
    assert label_problems(["pool"]) == ['give labels as an object of "key": "value" pairs']
