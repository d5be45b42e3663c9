"""``kubectl allot why job/NAME`` and ``allot-why JOBID``: why a job waits and what would make it run, where
researchers submit. Installed with the package as ``kubectl-allot`` (kubectl finds plugins on PATH by that name)
and ``allot-why`` (for Slurm jobs: ``GET /api/v1/waiting/<cluster>/<jobid>/``).

Stdlib only: it asks Allot's API (``GET /api/v1/waiting/<cluster>/<namespace>/<kind/name>/``) with the
reader's own token, so it shows what the reader may read. Configuration: ``ALLOT_URL`` (e.g.
https://allot.example.org), ``ALLOT_TOKEN`` (an API token: the portal's profile page), ``ALLOT_CLUSTER`` (the
cluster's name in Allot); the namespace is ``-n``, else the kubeconfig context's, else ``default``. The token is
sent over plain ``http://`` only to this machine (loopback) unless ``--allow-http`` says so; what the answer
holds that a cluster wrote (job names, the scheduler's words) is printed without its control characters."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

USAGE = "kubectl allot why job/NAME [-n NAMESPACE] [--cluster NAME] [--json] [--allow-http]"
SLURM_USAGE = "allot-why JOBID [--cluster NAME] [--json] [--allow-http]"
ENVIRONMENT = """environment:
  ALLOT_URL      Allot's address, e.g. https://allot.example.org
  ALLOT_TOKEN    your API token (the portal's profile page); sent only over https://, or http:// to this machine
  ALLOT_CLUSTER  the cluster's name in Allot (or --cluster)"""
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Every control character but the line break (terminal escapes, carriage returns, bidirectional overrides)."""


def printable(text: str) -> str:
    """``text`` with every control character but the line break removed: an answer holds what a cluster wrote
    (a job's name, the scheduler's message), and an escape sequence in it must not reach the terminal."""
    return _CONTROL.sub("", text)


def plain_http_refused(base: str) -> str | None:
    """Why the token may not go to ``base`` as it is: plain http:// to another machine (anyone on the path could
    read the token); None for https:// and for http:// to loopback."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme == "https":
        return None
    if parts.scheme != "http":
        return f"ALLOT_URL={base!r} is not an http(s):// address"
    host = (parts.hostname or "").lower()
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (
        f"ALLOT_URL is plain http:// to {host}: ALLOT_TOKEN would cross the network readable by anyone on the path; "
        "use https://, or --allow-http if you accept that"
    )


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


def _parser(prog: str, usage: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=usage,
        description=description,
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cluster", default=os.environ.get("ALLOT_CLUSTER", ""), help="the cluster's name in Allot")
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    parser.add_argument(
        "--allow-http", action="store_true", help="send the token over plain http:// to another machine all the same"
    )
    return parser


def kubectl_main(argv: list[str] | None = None) -> int:
    parser = _parser("kubectl allot", USAGE, "Why a Kubernetes workload waits, and what would make it run.")
    parser.add_argument("verb", choices=["why"], help="why: explain a waiting workload")
    parser.add_argument(
        "target",
        help="job/NAME (or jobset/, pytorchjob/, mpijob/, tfjob/, leaderworkerset/, rayjob/), or a Workload's name",
    )
    parser.add_argument("-n", "--namespace", default=None, help="its namespace (default: the kubeconfig context's)")
    args = parser.parse_args(argv)
    parts = lambda: (args.namespace or _namespace(), args.target)
    return _ask(args.cluster, args.json, args.allow_http, USAGE, parts)


def slurm_main(argv: list[str] | None = None) -> int:
    parser = _parser("allot-why", SLURM_USAGE, "Why a Slurm job waits, and what would make it run.")
    parser.add_argument("job", help="the job id, as sbatch printed it")
    args = parser.parse_args(argv)
    return _ask(args.cluster, args.json, args.allow_http, SLURM_USAGE, lambda: (args.job,))


def _ask(cluster: str, as_json: bool, allow_http: bool, usage: str, parts: Callable[[], tuple[str, ...]]) -> int:
    base, token = os.environ.get("ALLOT_URL", ""), os.environ.get("ALLOT_TOKEN", "")
    missing = [n for n, v in (("ALLOT_URL", base), ("ALLOT_TOKEN", token), ("ALLOT_CLUSTER", cluster)) if not v]
    if missing:
        print(f"set {', '.join(missing)} (ALLOT_CLUSTER may be --cluster): {usage}", file=sys.stderr)
        return 2
    refused = plain_http_refused(base)
    if refused and not (allow_http and base.startswith("http://")):
        print(refused, file=sys.stderr)
        return 2
    try:
        data = fetch(base, token, cluster, *parts())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        print(f"Allot answered {exc.code}: {printable(detail)}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"Allot at {printable(base)} could not be reached: {printable(str(exc))}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2, default=str) if as_json else printable(render(data)))
    return 0


if __name__ == "__main__":
    raise SystemExit(kubectl_main())
