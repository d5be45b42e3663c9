"""The Slurm translator, and sacctmgr's formats read from real captured output."""

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.slurm.parse import parse_assoc, parse_qos, parse_time, parse_tres
from quotas.policy.slurm.render import qos_script, render_dump
from quotas.policy.slurm.translate import SlurmFlavor, SlurmTarget, compile_slurm
from quotas.policy.snapshot import Contract

H100, A100 = "lab/h100", "lab/a100"


def tree():
    """acme (h100 64) → research (40, b10) → nlp (24, b8) → llm (16, b4); ops (8, no burst); members."""
    b = TreeBuilder()
    b.flavor(H100, 64)
    b.flavor(A100, 8)
    b.contracts["std"] = Contract("std", 900, 20, 30)
    acme = b.unit("acme", UnitKind.ORGANISATION, weight=100, contract="std")
    research = b.unit("research", UnitKind.DEPARTMENT, acme, weight=60)
    nlp = b.unit("nlp", UnitKind.TEAM, research, weight=50)
    llm = b.unit("llm", UnitKind.PROJECT, nlp, weight=70)
    ops = b.unit("ops", UnitKind.DEPARTMENT, acme, weight=40)
    b.unit("idle", UnitKind.DEPARTMENT, acme)
    for unit, g, burst in ((acme, 64, 0), (research, 40, 10), (nlp, 24, 8), (llm, 16, 4), (ops, 8, 0)):
        b.quota(unit, H100, Resource.GPU, g, burst)
    b.quota(acme, A100, Resource.GPU, 8)
    b.quota(nlp, A100, Resource.GPU, 2, 2)
    target = SlurmTarget(
        "lab",
        (SlurmFlavor(H100, "h100", 2.0), SlurmFlavor(A100, "a100", 1.0)),
        members={nlp: ("Alice", "dave"), llm: ("alice",), ops: ("erin",)},
    )
    return b.build(), target


def test_accounts_top_down_with_fairshare_and_their_own_qos():
    state = compile_slurm(*tree())
    accounts = {a.name: a for a in state.accounts}
    assert [a.name for a in state.accounts] == ["acme", "ops", "research", "nlp", "llm"]  # idle is not there
    assert (accounts["acme"].parent, accounts["research"].parent, accounts["llm"].parent) == ("root", "acme", "nlp")
    assert accounts["research"].fairshare == 60 and accounts["nlp"].description == "team acme/research/nlp"
    assert accounts["nlp"].qos == ("burst-nlp", "guar-nlp") and accounts["nlp"].default_qos == "guar-nlp"
    assert accounts["ops"].qos == ("guar-ops",) and accounts["acme"].organization == "acme"


def test_guarantees_are_qos_on_the_residual_and_burst_preemptible_under_the_contract():
    state = compile_slurm(*tree())
    qos = {q.name: q for q in state.qos}
    # nlp guarantees 24 h100, its project llm 16: nlp's own QOS covers the other 8; llm has its own
    assert qos["guar-nlp"].grp_tres == {"gres/gpu:h100": 8, "gres/gpu:a100": 2}
    assert qos["guar-llm"].grp_tres == {"gres/gpu:h100": 16}
    assert qos["guar-acme"].grp_tres == {"gres/gpu:h100": 16, "gres/gpu:a100": 8}  # 64 − 40 − 8 unassigned
    burst = qos["burst-nlp"]
    assert (burst.grp_tres, burst.preempt_mode, burst.grace_time_s, burst.preempt_exempt_s, burst.usage_factor) == (
        {"gres/gpu:h100": 8, "gres/gpu:a100": 2},
        "requeue",
        20,
        30,
        0.5,
    )
    assert qos["guar-nlp"].preempt == ("burst-llm", "burst-nlp", "burst-research")
    names = [q.name for q in state.qos]
    assert names.index("burst-nlp") < names.index("guar-nlp")  # preemptees before preemptors
    assert all(not name.startswith("gres") for a in state.accounts for name in a.qos)


def test_users_lowercased_with_one_default_account_and_billing_weights():
    state = compile_slurm(*tree())
    assert [(u.name, u.account, u.default_account) for u in state.users] == [
        ("alice", "llm", "llm"),
        ("alice", "nlp", "llm"),
        ("dave", "nlp", "nlp"),
        ("erin", "ops", "ops"),
    ]
    assert state.billing == {
        "lab/a100": "CPU=1.0,Mem=0.25G,GRES/gpu:a100=10",
        "lab/h100": "CPU=1.0,Mem=0.25G,GRES/gpu:h100=20",
    }


def test_output_is_deterministic():
    snapshot, target = tree()
    assert render_dump(compile_slurm(snapshot, target)) == render_dump(compile_slurm(snapshot, target))
    assert qos_script(compile_slurm(snapshot, target)) == qos_script(compile_slurm(snapshot, target))


def test_dump_format_puts_each_parent_before_its_children():
    text = render_dump(compile_slurm(*tree()))
    lines = text.splitlines()
    assert lines[1] == "Cluster - 'lab':Fairshare=1:QOS='normal'"
    assert lines.index("Parent - 'research'") < lines.index("Parent - 'nlp'")
    nlp = next(line for line in lines if line.startswith("Account - 'nlp'"))
    assert nlp == (
        "Account - 'nlp':Description='team acme/research/nlp':Organization='acme':Fairshare=50:"
        "DefaultQOS='guar-nlp':QOS='burst-nlp,guar-nlp'"
    )
    assert "User - 'dave':DefaultAccount='nlp':Fairshare=1" in lines
    script = qos_script(compile_slurm(*tree()))
    assert "sacctmgr -i add qos burst-nlp 'Description=borrowing above guarantee acme/research/nlp'" in script
    assert "'GrpTRES=gres/gpu:a100=2,gres/gpu:h100=8'" in script and "'PreemptExemptTime=00:00:30'" in script


def test_reading_real_sacctmgr_output(shared_reference):
    outputs = shared_reference / "slurm" / "outputs"
    columns = [
        "Cluster",
        "Account",
        "User",
        "ParentName",
        "Share",
        "GrpTRES",
        "GrpJobs",
        "GrpSubmit",
        "MaxTRES",
        "MaxTRESPerNode",
        "MaxJobs",
        "MaxSubmit",
        "MaxWall",
        "QOS",
        "DefaultQOS",
        "Priority",
    ]
    accounts, users = parse_assoc((outputs / "sacctmgr-n-P-show-assoc.psv").read_text(), columns)
    by_name = {a.name: a for a in accounts}
    assert by_name["nlp"].parent == "research" and by_name["nlp"].fairshare == 50
    assert by_name["nlp"].qos == ("burst", "guar-nlp") and by_name["nlp"].default_qos == "guar-nlp"
    assert ("carol", "serving") in {(u.name, u.account) for u in users}
    qos = {q.name: q for q in parse_qos((outputs / "sacctmgr-P-show-qos.psv").read_text())}
    burst = qos["burst"]
    assert (burst.priority, burst.grace_time_s, burst.preempt_exempt_s, burst.preempt_mode, burst.usage_factor) == (
        10,
        20,
        30,
        "requeue",
        0.5,
    )
    assert qos["guar-nlp"].preempt == ("burst",) and qos["guar-nlp"].grp_tres == {"gres/gpu": 3}


def test_slurm_time_and_tres_formats():
    assert parse_time("00:00:30") == 30 and parse_time("1-02:00:00") == 93600 and parse_time("") == 0
    assert parse_time("30:00") == 1800
    assert parse_tres("gres/gpu=4,cpu=8") == {"gres/gpu": 4, "cpu": 8} and parse_tres("") == {}


def test_the_submission_snapshot_for_job_submit_lua():
    from quotas.policy.slurm.submit import render_json, render_lua, submit_policy

    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    policy = submit_policy(snapshot, target, state, revision=7, archived=["Old-Team", "nlp"])
    assert policy["version"] == 7 and policy["archived"] == ["old-team"]  # an active account is never archived
    assert policy["accounts"]["llm"] == {
        "path": "acme/research/nlp/llm",
        "qos": ["burst-llm", "guar-llm"],
        "gpus": {"a100": 0, "h100": 20},
    }  # no a100 of its own; h100: min over the path
    assert policy["interactive_max_minutes"] is None
    lua = render_lua(policy)
    assert lua.startswith("-- Allot policy snapshot") and 'return {\n  ["accounts"] = {' in lua
    assert '["gpus"] = {\n        ["a100"] = 0,' in lua and '["qos"] = {"burst-llm", "guar-llm"},' in lua
    assert lua == render_lua(submit_policy(snapshot, target, state, revision=7, archived=["old-team"]))
    assert '"version": 7' in render_json(policy)
