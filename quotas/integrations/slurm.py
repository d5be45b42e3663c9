"""The only code that runs Slurm's commands: ``sacctmgr`` (four reads, made at once, then ``sacctmgr -i``
writes one after the other, each with its exit code and output kept) and ``sacct`` (usage, streamed). A
Slurm cluster's ``connection_ref`` is ``slurm:<cluster name in slurmdbd>``.

Each sacctmgr call costs a round trip to slurmdbd (about 0.2 s to read, 0.4 s to write on the local
stack) whatever it carries. Reads are made at once (up to ``Sacctmgr.concurrency``). Writes never are:
measured on Slurm 22.05 with MariaDB, concurrent ``sacctmgr -i`` writes deadlock in slurmdbd's
database ("unable to resolve deadlock", and slurmdbd exits) and leave slurmctld holding associations
slurmdbd has deleted."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from quotas.policy.slurm.model import ACCOUNT_LIMITS, QOS_LIMITS, SlurmAccount, SlurmQos, SlurmUser
from quotas.policy.slurm.parse import parse_assoc, parse_qos

ASSOC_FORMAT = [
    "Cluster", "Account", "User", "ParentName", "Share", "QOS", "DefaultQOS", *ACCOUNT_LIMITS, "Partition", "Priority",
]  # fmt: skip
QOS_FORMAT = [
    "Name",
    "Description",
    "Priority",
    "GraceTime",
    "Preempt",
    "PreemptExemptTime",
    "PreemptMode",
    "UsageFactor",
    "GrpTRES",
    "MaxWall",
    "Flags",
    *QOS_LIMITS,
]


class SlurmError(Exception):
    """sacctmgr is missing, or slurmdbd did not answer; the message says which."""


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    output: str


class Sacctmgr:
    def __init__(
        self,
        binary: str = "sacctmgr",
        timeout: int = 60,
        env: Mapping[str, str] | None = None,
        concurrency: int = 8,
    ) -> None:
        """``env``: extra environment, e.g. ``SLURM_CONF`` for a cluster whose slurm.conf is elsewhere;
        ``concurrency``: how many reads :meth:`run_many` makes at once (1: one after the other)."""
        self.binary, self.timeout, self.concurrency = binary, timeout, max(1, concurrency)
        self.env = {**os.environ, **env} if env else None
        self.calls = 0
        self._count = threading.Lock()

    def run(self, *argv: str) -> Result:
        with self._count:
            self.calls += 1
        try:
            done = subprocess.run(
                [self.binary, *argv], capture_output=True, text=True, timeout=self.timeout, check=False, env=self.env
            )
        except FileNotFoundError as exc:
            raise SlurmError(f"{self.binary} is not installed here: install Slurm's client (slurm-client)") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{self.binary} {' '.join(argv[:3])} did not answer within {self.timeout} s") from exc
        return Result(tuple(argv), done.returncode, (done.stdout + done.stderr).strip())

    def run_many(self, argvs: Sequence[tuple[str, ...]]) -> list[Result]:
        """Read calls at once (up to ``concurrency``), their results in the order given. Never writes:
        see the module's docstring."""
        if len(argvs) <= 1 or self.concurrency == 1:
            return [self.run(*argv) for argv in argvs]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(argvs))) as pool:
            return list(pool.map(lambda argv: self.run(*argv), argvs))

    def _read(self, *argv: str) -> str:
        return self._checked(self.run("-n", "-P", *argv))

    def _read_many(self, *argvs: tuple[str, ...]) -> list[str]:
        return [self._checked(r) for r in self.run_many([("-n", "-P", *argv) for argv in argvs])]

    def _checked(self, result: Result) -> str:
        argv = result.argv[2:]
        if result.returncode != 0:
            hint = ""
            if "connection refused" in result.output.lower() or "persistent connection" in result.output.lower():
                hint = (
                    "slurmdbd did not answer: is it running, and do AccountingStorageHost/Port in slurm.conf "
                    "point at it? Nothing was changed; the next sync tries again. "
                )
            raise SlurmError(f"{hint}sacctmgr {' '.join(argv[:2])} failed (rc={result.returncode}): {result.output}")
        return result.output

    def read(self, cluster: str) -> tuple[list[SlurmAccount], list[SlurmUser], list[SlurmQos], dict[str, str]]:
        """Accounts, user associations (with each user's DefaultAccount on this cluster), QOS and
        account descriptions."""
        accounts, users, qos, descriptions, _ = self.read_state(cluster)
        return accounts, users, qos, descriptions

    def read_state(
        self, cluster: str
    ) -> tuple[list[SlurmAccount], list[SlurmUser], list[SlurmQos], dict[str, str], frozenset[str]]:
        """:meth:`read`, and the QOS that associations of the slurmdbd's *other* clusters list (a sync
        never deletes those): five read calls, made at once. A user's DefaultAccount is per cluster
        (``show user`` alone prints one cluster's, whichever slurmdbd finds first)."""
        assoc_text, user_text, qos_text, account_text, other_text = self._read_many(
            ("show", "assoc", "where", f"cluster={cluster}", f"format={','.join(ASSOC_FORMAT)}"),
            ("show", "user", "withassoc", "where", f"cluster={cluster}", "format=User,DefaultAccount"),
            ("show", "qos", f"format={','.join(QOS_FORMAT)}"),
            ("show", "account", "format=Account,Descr"),
            ("show", "assoc", "format=Cluster,QOS"),
        )
        accounts, users = parse_assoc(assoc_text, ASSOC_FORMAT)
        defaults = dict(line.lower().split("|", 1) for line in user_text.splitlines() if "|" in line)
        elsewhere = frozenset(
            name
            for line in other_text.lower().splitlines()
            if "|" in line and line.split("|", 1)[0] != cluster.lower()
            for name in line.split("|", 1)[1].split(",")
            if name
        )
        users = [replace(u, default_account=defaults.get(u.name, "")) for u in users]
        qos = parse_qos(qos_text, QOS_FORMAT)
        descriptions = {}
        for line in account_text.splitlines():
            name, _, description = line.partition("|")
            descriptions[name.lower()] = description.lower()
        return accounts, users, qos, descriptions, elsewhere

    def read_tres(self) -> set[str]:
        """The cluster's trackable resources as limits name them, e.g. ``gres/gpu:a100``."""
        found = set()
        for line in self._read("show", "tres", "format=Type,Name").splitlines():
            kind, _, name = line.partition("|")
            found.add(f"{kind}/{name}".lower() if name else kind.lower())
        return found

    def read_qos(self) -> list[SlurmQos]:
        return parse_qos(self._read("show", "qos", f"format={','.join(QOS_FORMAT)}"), QOS_FORMAT)

    def write(self, argv: tuple[str, ...]) -> Result:
        return self.run("-i", *argv)

    def load(self, text: str) -> Result:
        """``sacctmgr -i load file=…`` of a (partial) dump: new accounts and users in one call."""
        with tempfile.TemporaryDirectory(prefix="allot-sacctmgr-") as work:
            path = Path(work) / "allot-load.cfg"
            path.write_text(text)
            return self.run("-i", "load", f"file={path}")


class Sacct:
    """``sacct`` over a time window, its output streamed line by line (a month of a large site is
    millions of lines): ``--parsable2 --noheader --allocations --duplicates`` for every user."""

    def __init__(self, binary: str = "sacct", timeout: int = 600, env: Mapping[str, str] | None = None) -> None:
        self.binary, self.timeout = binary, timeout
        self.env = {**os.environ, **env} if env else None

    def argv(self, cluster: str, start: str, end: str, fields: str) -> list[str]:
        return [
            self.binary,
            "--parsable2",
            "--noheader",
            "--allocations",
            "--duplicates",
            "--allusers",
            f"--clusters={cluster}",
            f"--starttime={start}",
            f"--endtime={end}",
            f"--format={fields}",
        ]

    def billing_weights(self, cluster: str, scontrol: str = "scontrol") -> dict[str, str]:
        """Each partition's ``TRESBillingWeights`` as slurmctld holds them (``scontrol -M <cluster>
        show partition -o``): what fair-share usage is billed with. Empty when scontrol is missing or
        the controller does not answer (usage then falls back to sacct's rounded ``billing=``)."""
        try:
            done = subprocess.run(
                [scontrol, "-M", cluster, "show", "partition", "-o"],
                capture_output=True, text=True, timeout=60, check=False, env=self.env,
            )  # fmt: skip
        except (FileNotFoundError, subprocess.TimeoutExpired):
            return {}
        found = {}
        for line in done.stdout.splitlines() if done.returncode == 0 else ():
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            if fields.get("PartitionName") and fields.get("TRESBillingWeights"):
                found[fields["PartitionName"]] = fields["TRESBillingWeights"]
        return found

    def lines(self, cluster: str, start: str, end: str, fields: str) -> Iterator[str]:
        """Output lines as sacct prints them. Raises SlurmError, with sacct's own words, when it fails."""
        argv = self.argv(cluster, start, end, fields)
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env, bufsize=1 << 16
            )
        except FileNotFoundError as exc:
            raise SlurmError(f"{self.binary} is not installed here: install Slurm's client (slurm-client)") from exc
        assert proc.stdout is not None and proc.stderr is not None
        yield from proc.stdout
        try:
            returncode = proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            raise SlurmError(f"sacct did not finish within {self.timeout} s") from exc
        if returncode != 0:
            error = proc.stderr.read().strip()
            hint = "is slurmdbd running, and does slurm.conf point at it? " if "connect" in error.lower() else ""
            raise SlurmError(f"sacct failed (rc={returncode}): {hint}{error}")


class SlurmInventory:
    """What slurmctld holds now: its nodes (``scontrol -M <cluster> show node -o``) and its pending
    jobs' GPU shapes (``squeue -M <cluster> -h -t PD -o "%i|%b|%D"``). Raw text; SlurmError with
    the command's own words when it fails."""

    def __init__(
        self, scontrol: str = "scontrol", squeue: str = "squeue", env: Mapping[str, str] | None = None
    ) -> None:
        self.scontrol, self.squeue = scontrol, squeue
        self.env = {**os.environ, **env} if env else None

    def _run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=self.env)
        except FileNotFoundError as exc:
            raise SlurmError(f"{argv[0]} is not installed here: install Slurm's client (slurm-client)") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{argv[0]} did not answer within 120 s") from exc
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(argv[:4])} failed (rc={done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def nodes(self, cluster: str) -> str:
        return self._run([self.scontrol, "-M", cluster, "show", "node", "-o"])

    def partitions(self, cluster: str) -> str:
        return self._run([self.scontrol, "-M", cluster, "show", "partition", "-o"])

    def queue(self, cluster: str, fmt: str) -> str:
        """Every job slurmctld holds, in ``fmt`` (``squeue -M <cluster> -h -o fmt``), without ``CLUSTER:`` lines."""
        text = self._run([self.squeue, "-M", cluster, "-h", "-o", fmt])
        return "\n".join(line for line in text.splitlines() if not line.startswith("CLUSTER:"))

    def queue_fields(self, cluster: str, fields: Sequence[str]) -> str:
        """Every job slurmctld holds, one line each with ``fields`` each ended by ``|`` (``squeue -M <cluster> -h
        -O "JobID:|,…"``: the long form, the only one that prints tres-per-job/task/socket), without ``CLUSTER:``
        lines."""
        text = self._run([self.squeue, "-M", cluster, "-h", "-O", ",".join(f"{f}:|" for f in fields)])
        return "\n".join(line for line in text.splitlines() if not line.startswith("CLUSTER:"))

    def qos_usage(self, cluster: str, names: list[str]) -> str:
        """The QOS' limits and what their jobs hold now (``scontrol -M <cluster> show assoc_mgr flags=qos qos=…``)."""
        return self._run([self.scontrol, "-M", cluster, "show", "assoc_mgr", "flags=qos", f"qos={','.join(names)}"])

    def pending(self, cluster: str) -> str:
        text = self._run([self.squeue, "-M", cluster, "-h", "-t", "PD", "-o", "%i|%b|%D"])
        return "\n".join(line for line in text.splitlines() if not line.startswith("CLUSTER:"))
