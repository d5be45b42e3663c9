"""The admission webhook against the real Kueue, differentially, at length.

    ALLOT_KUBE_ASSETS=/path/to/kube-assets python bench/admission_differential.py

Starts the tests' control plane (tests/kube_cluster.py: etcd, kube-apiserver, kube-controller-manager, Kueue),
puts tests/admission/differential.py's org on it (flavors with different node-label keys, a tainted flavor,
a MIG flavor), and runs BENCH_CASES (2000) seeded Jobs, BENCH_BATCH (40) at a time, through the webhooks
(mutating, then validating) and through Kueue on a queue with quota to spare. A disagreement is a Job the
webhook allows that Kueue never admits (a false allow) or one it refuses that Kueue admits (a false refusal);
each is printed with both texts. Seeds start at BENCH_SEED (1), one per batch.
The LAST line is key=value pairs: admission_cases, admission_disagreements, false_allows, false_refusals,
allowed, refused, seconds.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOT_SECRET_KEY", "bench-only-not-a-secret")

import django  # noqa: E402

django.setup()

from tests.admission.differential import cases, run, setup  # noqa: E402
from tests.kube_cluster import start_for_session  # noqa: E402


def main() -> None:
    total = int(os.environ.get("BENCH_CASES", "2000"))
    batch = int(os.environ.get("BENCH_BATCH", "40"))
    seed = int(os.environ.get("BENCH_SEED", "1"))
    started = time.monotonic()
    plane = start_for_session()
    outcomes = []
    try:
        policy = setup(plane)
        while len(outcomes) < total:
            found = run(plane, policy, list(cases(seed, min(batch, total - len(outcomes)))))
            outcomes.extend(found)
            for o in found:
                if not o.agrees:
                    print(o.line(), flush=True)
            wrong = sum(not o.agrees for o in outcomes)
            print(f"seed {seed}: {len(outcomes)}/{total} cases, {wrong} disagreements", file=sys.stderr, flush=True)
            seed += 1
    finally:
        plane.stop()
    false_allows = sum(o.allowed and not o.admitted for o in outcomes)
    false_refusals = sum(not o.allowed and o.admitted for o in outcomes)
    allowed = sum(o.allowed for o in outcomes)
    print(
        f"admission_cases={len(outcomes)} admission_disagreements={false_allows + false_refusals} "
        f"false_allows={false_allows} false_refusals={false_refusals} allowed={allowed} "
        f"refused={len(outcomes) - allowed} seconds={time.monotonic() - started:.0f}"
    )


if __name__ == "__main__":
    main()
