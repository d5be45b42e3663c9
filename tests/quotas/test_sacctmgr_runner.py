"""The sacctmgr runner without a Slurm: a stand-in ``sacctmgr`` script records how it was called."""

import stat

import pytest

from quotas.integrations.slurm import Sacctmgr, SlurmError


def _fake(tmp_path, body):
    script = tmp_path / "sacctmgr"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_the_five_reads_are_made_at_once_and_parsed_in_their_places(tmp_path):
    """Each read waits until all five have started (a barrier of files): made one after the other,
    the first would wait forever and the runner's timeout would fail the read."""
    binary = _fake(
        tmp_path,
        f"""touch {tmp_path}/started.$$
while [ "$(ls {tmp_path} | grep -c started)" -lt 5 ]; do sleep 0.05; done
case "$*" in
  *"show assoc format=Cluster,QOS"*) printf "lab|guar-nlp\nother|guar-astro,burst-astro\nother|\n" ;;
  *"show assoc"*) echo "lab|nlp||research|5|guar-nlp|guar-nlp|||||||||" ;;
  *"show user"*) echo "alice|nlp" ;;
  *"show qos"*) echo "guar-nlp|allot: guaranteed gpus|1000|00:00:00||00:00:00|cluster|1.000000|gres/gpu:a100=2|||||" ;;
  *"show account"*) echo "nlp|team acme/research/nlp" ;;
esac
""",
    )
    runner = Sacctmgr(binary=binary, timeout=5)
    accounts, users, qos, descriptions, elsewhere = runner.read_state("lab")
    assert [(a.name, a.parent, a.fairshare) for a in accounts] == [("nlp", "research", 5)]
    assert [q.name for q in qos] == ["guar-nlp"] and qos[0].grp_tres == {"gres/gpu:a100": 2}
    assert descriptions == {"nlp": "team acme/research/nlp"} and users == []
    assert elsewhere == {"guar-astro", "burst-astro"}  # what the slurmdbd's other clusters list
    assert runner.calls == 5
    for started in tmp_path.glob("started.*"):
        started.unlink()
    with pytest.raises(SlurmError, match="did not answer within"):
        Sacctmgr(binary=binary, timeout=1, concurrency=1).read("lab")  # one at a time: the barrier never opens


def test_a_failed_read_names_the_call_and_what_slurmdbd_said(tmp_path):
    binary = _fake(tmp_path, 'case "$*" in *"show qos"*) echo "Connection refused" >&2; exit 1;; esac\n')
    with pytest.raises(SlurmError, match=r"slurmdbd did not answer.*sacctmgr show qos failed \(rc=1\)"):
        Sacctmgr(binary=binary, timeout=5).read("lab")
