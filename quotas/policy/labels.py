"""Kubernetes label rules, as the API server and Kueue's ResourceFlavor webhook (ValidateLabels)
apply them: checked when a flavor is entered, so a bad label never reaches a cluster and blocks its
sync. Pure.

* key: an optional prefix — a DNS subdomain (lowercase, ≤ 253 characters) — and ``/``, then a name of
  at most 63 characters: alphanumerics, ``-``, ``_``, ``.``, beginning and ending alphanumeric;
* value: empty, or at most 63 characters of the same alphabet, beginning and ending alphanumeric;
* a ResourceFlavor carries at most 8 node labels (its CRD's ``maxProperties``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

LABEL_OWNER = "allot.dev/owner"
LABEL_PROJECT = "allot.dev/project"
LABEL_TIER = "allot.dev/tier"
LABEL_CONTRACT = "allot.dev/contract"
GOVERNANCE_LABELS = (LABEL_OWNER, LABEL_PROJECT, LABEL_TIER, LABEL_CONTRACT)
"""What the admission webhook puts on every workload, and Kueue copies into its Workloads
(``integrations.labelKeysToCopy``): one vocabulary for admission and the Kueue configuration."""
LABEL_UNIT = "allot.dev/unit"
LABEL_DEPARTMENT = "allot.dev/department"
LABEL_COST_CENTRE = "allot.dev/cost-centre"
ORG_LABELS = (LABEL_UNIT, LABEL_DEPARTMENT, LABEL_COST_CENTRE)
"""What Allot stamps on its Cohorts, ClusterQueues and LocalQueues so Kueue's own metrics carry the
organisation (``metrics.customLabels``)."""

NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_NODE_LABELS = 8


def label_problems(labels: object, *, limit: int | None = MAX_NODE_LABELS) -> list[str]:
    """Every way ``labels`` breaks the rules, each naming the label and the rule; [] when none."""
    if not isinstance(labels, Mapping):
        return ['give labels as an object of "key": "value" pairs']
    problems = []
    if limit is not None and len(labels) > limit:
        problems.append(f"{len(labels)} labels: Kueue allows at most {limit} node labels on a flavor")
    for key, value in labels.items():
        problems += [f"label {key!r}: {p}" for p in _key_problems(str(key))]
        if not isinstance(value, str):
            problems.append(f'label {key!r}: the value must be a string, e.g. "true"')
        elif value and (len(value) > 63 or not NAME.match(value)):
            problems.append(
                f"label {key!r}: value {value!r} must be at most 63 characters of letters, digits, '-', '_' "
                f"or '.', beginning and ending with a letter or digit"
            )
    return problems


def value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label value, or None."""
    if value and (len(value) > 63 or not NAME.match(value)):
        return "at most 63 characters of letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
    return None


def _key_problems(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    problems = []
    if prefix and (len(prefix) > 253 or not SUBDOMAIN.match(prefix)):
        problems.append(f"prefix {prefix!r} must be a lowercase DNS subdomain (e.g. nvidia.com)")
    if not name or len(name) > 63 or not NAME.match(name):
        problems.append(
            f"name {name!r} must be 1 to 63 characters of letters, digits, '-', '_' or '.', beginning and ending "
            f"with a letter or digit"
        )
    return problems
