"""``kubectl allot why job/NAME`` and ``allot-why JOBID``: why a job waits and what would make it run, where
researchers submit (issue #44.5). Installed with the package as ``kubectl-allot`` (kubectl finds plugins on
PATH by that name) and ``allot-why`` (for Slurm jobs: ``GET /api/v1/waiting/<cluster>/<jobid>/``).

Stdlib only: it asks Allot's API (``GET /api/v1/waiting/<cluster>/<namespace>/<kind/name>/``) with the
reader's own token, so it shows what the reader may read. Configuration: ``ALLOT_URL`` (e.g.
https://allot.example.org), ``ALLOT_TOKEN`` (an API token: the portal's profile page), ``ALLOT_CLUSTER`` (the
cluster's name in Allot); the namespace is ``-n``, else the kubeconfig context's, else ``default``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

USAGE = "kubectl allot why job/NAME [-n NAMESPACE] [--cluster NAME] [--json]"
SLURM_USAGE = "allot-why JOBID [--cluster NAME] [--json]"


def _namespace() -> str:
    try:
        found = subprocess.run(
            ["kubectl", "config", "view", "--minify", "-o", "jsonpath={..namespace}"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "default"
    return found.stdout.strip() or "default"


def fetch(base: str, token: str, *parts: str) -> dict[str, Any]:
    """``GET /api/v1/waiting/<parts…>/`` (the last part may hold a slash: ``job/train``)."""
    quoted = [urllib.parse.quote(part, safe="") for part in parts[:-1]] + [urllib.parse.quote(parts[-1])]
    url = f"{base.rstrip('/')}/api/v1/waiting/{'/'.join(quoted)}/"
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        data: dict[str, Any] = json.load(answer)
    return data


def render(data: dict[str, Any]) -> str:
    age = data.get("age_seconds")
    lines = [
        f"{data['workload']} ({data.get('job') or 'no job'}) of {data['unit'] or 'no unit'}: {data['state']}, "
        f"asks for {data['devices']} devices",
        f"  live view {'never refreshed' if age is None else f'{age:.0f} s old'}",
    ]
    causes = data.get("causes") or []
    lines.append("Why it waits:" if causes else "Nothing keeps it waiting that Allot can see.")
    for i, cause in enumerate(causes, 1):
        lines.append(f"  {i}. {cause['title']}")
        lines += [f"     - {e}" for e in cause.get("evidence") or []]
    ways = data.get("ways_out") or []
    if ways:
        lines.append("What would make it run:")
        for way in ways:
            blocked = f" (not as it is: {way['blocked_by']})" if way.get("blocked_by") else ""
            lines.append(f"  - {way['text']}{blocked}")
    estimate, calibration = data.get("estimate"), data.get("calibration") or {}
    if estimate:
        share = calibration.get("share_inside")
        held = (
            f"; such bands held for {share:.0%} of the last {calibration.get('jobs')} jobs" if share is not None else ""
        )
        lines.append(
            f"When: between {estimate['start_after']} and {estimate['start_by']} ({data['estimate_note']}{held})"
        )
    else:
        lines.append(f"When: {data.get('estimate_note') or 'no estimate'}")
    if data.get("scheduler_says"):
        lines.append(f"The scheduler says: {data['scheduler_says']}")
    if data.get("queue_says"):
        lines.append(data["queue_says"])
    return "\n".join(lines)


def kubectl_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubectl allot", usage=USAGE, description=__doc__.split("\n\n")[0])
    parser.add_argument("verb", choices=["why"], help="why: explain a waiting workload")
    parser.add_argument("target", help="job/NAME (or jobset/, pytorchjob/, rayjob/), or a Workload's name")
    parser.add_argument("-n", "--namespace", default=None)
    parser.add_argument("--cluster", default=os.environ.get("ALLOT_CLUSTER", ""))
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    args = parser.parse_args(argv)
    return _ask(args.cluster, args.json, USAGE, lambda: (args.namespace or _namespace(), args.target))


def slurm_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="allot-why", usage=SLURM_USAGE, description="Why a Slurm job waits.")
    parser.add_argument("job", help="the job id, as sbatch printed it")
    parser.add_argument("--cluster", default=os.environ.get("ALLOT_CLUSTER", ""))
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    args = parser.parse_args(argv)
    return _ask(args.cluster, args.json, SLURM_USAGE, lambda: (args.job,))


def _ask(cluster: str, as_json: bool, usage: str, parts: Callable[[], tuple[str, ...]]) -> int:
    base, token = os.environ.get("ALLOT_URL", ""), os.environ.get("ALLOT_TOKEN", "")
    missing = [n for n, v in (("ALLOT_URL", base), ("ALLOT_TOKEN", token), ("ALLOT_CLUSTER", cluster)) if not v]
    if missing:
        print(f"set {', '.join(missing)} (ALLOT_CLUSTER may be --cluster): {usage}", file=sys.stderr)
        return 2
    try:
        data = fetch(base, token, cluster, *parts())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        print(f"Allot answered {exc.code}: {detail}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"Allot at {base} could not be reached: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2, default=str) if as_json else render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(kubectl_main())
