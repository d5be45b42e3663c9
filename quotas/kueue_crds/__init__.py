"""The Kueue CRDs Allot validates compiled objects against (package data).

Copied unchanged from kubernetes-sigs/kueue (Apache-2.0); the version and how to refresh them are in
this folder's README. ``ALLOT_KUBERNETES_CRD_DIR`` points here unless set.
"""

from pathlib import Path

CRD_DIR = Path(__file__).resolve().parent
KUEUE_COMMIT = "ff69552e79ad21652c36caa97038382e55625cf7"
KUEUE_VERSION = "v0.20.0-devel-377-gff69552e79 (main after v0.19.2)"
KINDS = (
    "admissionchecks",
    "clusterqueues",
    "cohorts",
    "localqueues",
    "multikueueclusters",
    "multikueueconfigs",
    "resourceflavors",
    "workloadpriorityclasses",
)
