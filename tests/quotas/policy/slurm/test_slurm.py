"""The Slurm translator, and sacctmgr's formats read from real captured output."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.slurm.batch import batch
from quotas.policy.slurm.coverage import slurm_coverage
from quotas.policy.slurm.diff import plan_slurm
from quotas.policy.slurm.holdback import hold_back
from quotas.policy.slurm.model import SlurmAccount, SlurmQos
from quotas.policy.slurm.overcommit import subtree_overcommit
from quotas.policy.slurm.parse import parse_assoc, parse_qos, parse_time, parse_tres
from quotas.policy.slurm.render import qos_script, render_dump
from quotas.policy.slurm.translate import SlurmFlavor, SlurmTarget, compile_slurm
from quotas.policy.snapshot import Contract, Tier

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
        members={nlp: ("alice", "dave"), llm: ("alice",), ops: ("erin",)},
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


def permissive():
    snapshot, target = tree()
    return snapshot, dataclasses.replace(target, strict=False)


def test_guarantees_are_qos_on_the_residual_and_burst_preemptible_under_the_contract():
    state = compile_slurm(*permissive())
    qos = {q.name: q for q in state.qos}
    # nlp guarantees 24 h100, its project llm 16: nlp's own QOS covers the other 8; llm has its own
    # each unit QOS also holds the untyped gres/gpu to its typed total (the backstop: GPUs allocated
    # without a type count against no typed limit)
    assert qos["guar-nlp"].grp_tres == {"gres/gpu:h100": 8, "gres/gpu:a100": 2, "gres/gpu": 10}
    assert qos["guar-llm"].grp_tres == {"gres/gpu:h100": 16, "gres/gpu": 16}
    assert qos["guar-acme"].grp_tres == {"gres/gpu:h100": 16, "gres/gpu:a100": 8, "gres/gpu": 24}  # 64 − 40 − 8
    burst = qos["burst-nlp"]
    assert (burst.grp_tres, burst.preempt_mode, burst.grace_time_s, burst.preempt_exempt_s, burst.usage_factor) == (
        {"gres/gpu:h100": 8, "gres/gpu:a100": 2, "gres/gpu": 10},
        "requeue",
        20,
        30,
        0.5,
    )
    assert qos["guar-nlp"].preempt == ("burst-llm", "burst-nlp", "burst-research")
    names = [q.name for q in state.qos]
    assert names.index("burst-nlp") < names.index("guar-nlp")  # preemptees before preemptors
    assert all(not name.startswith("gres") for a in state.accounts for name in a.qos)


def test_users_with_one_default_account_and_billing_weights():
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
    text = render_dump(compile_slurm(*permissive()))
    lines = text.splitlines()
    assert lines[1] == "Cluster - 'lab':Fairshare=1:QOS='normal'"
    assert lines.index("Parent - 'research'") < lines.index("Parent - 'nlp'")
    nlp = next(line for line in lines if line.startswith("Account - 'nlp'"))
    assert nlp == (
        "Account - 'nlp':Description='team acme/research/nlp':Organization='acme':Fairshare=50:"
        "DefaultQOS='guar-nlp':QOS='burst-nlp,guar-nlp'"
    )
    assert "User - 'dave':DefaultAccount='nlp':Fairshare=1" in lines
    script = qos_script(compile_slurm(*permissive()))
    assert "sacctmgr -i add qos burst-nlp 'Description=allot@lab: borrowed gpus, requeued on reclaim'" in script
    assert (
        "'GrpTRES=gres/gpu=10,gres/gpu:a100=2,gres/gpu:h100=8'" in script and "'PreemptExemptTime=00:00:30'" in script
    )


def test_reading_real_sacctmgr_output(fixtures):
    outputs = fixtures / "slurm-outputs"
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
        "default_qos": "guar-llm",
        "gpus": {"a100": 0, "h100": 20},
        "qos_gpus": {"burst-llm": {"h100": 4}, "guar-llm": {"h100": 16}},
    }  # no a100 of its own; h100: min over the path; the largest job: 16, under guar-llm
    assert policy["interactive_max_minutes"] is None
    lua = render_lua(policy)
    assert lua.startswith("-- Allot policy snapshot") and 'return {\n  ["accounts"] = {' in lua
    assert '["gpus"] = {\n        ["a100"] = 0,' in lua and '["qos"] = {"burst-llm", "guar-llm"},' in lua
    assert lua == render_lua(submit_policy(snapshot, target, state, revision=7, archived=["old-team"]))
    assert '"version": 7' in render_json(policy)


def test_names_slurm_would_change_are_reported_and_left_out_not_lowercased():
    b = TreeBuilder()
    b.flavor(A100, 8)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    bad = b.unit("Vision Team", UnitKind.TEAM, acme)
    below = b.unit("cv", UnitKind.PROJECT, bad)
    good = b.unit("nlp", UnitKind.TEAM, acme)
    b.quota(acme, A100, Resource.GPU, 8)
    for unit in (bad, below, good):
        b.quota(unit, A100, Resource.GPU, 2)
    target = SlurmTarget("lab", (SlurmFlavor(A100, "a100"),), members={good: ("Alice", "bob")})
    state = compile_slurm(b.build(), target)
    assert [a.name for a in state.accounts] == ["acme", "nlp"]  # the bad unit and cv under it are left out
    assert [u.name for u in state.users] == ["bob"]
    problems = {(p.kind, p.name): p.message for p in state.problems}
    assert set(problems) == {("account", "Vision Team"), ("user", "Alice@nlp")}
    assert "acme/Vision Team" in problems[("account", "Vision Team")]
    assert "e.g. 'vision-team'" in problems[("account", "Vision Team")]
    assert (
        "Slurm lowercases names" in problems[("user", "Alice@nlp")]
        and "e.g. 'alice'" in problems[("user", "Alice@nlp")]
    )


def test_tiers_with_a_runtime_limit_become_qos_every_account_may_use():
    snapshot, target = tree()
    tiers = {
        "P2": Tier("P2", 1000, False, 4 * 3600 + 30, display_name="Interactive (notebooks)"),
        "P3": Tier("P3", 100, True, 3600),
        "P0": Tier("P0", 10000, False),
    }
    state = compile_slurm(snapshot.__class__(**{**snapshot.__dict__, "tiers": tiers}), target)
    qos = {q.name: q for q in state.qos}
    assert qos["tier-p2"].max_wall_min == 241
    assert qos["tier-p2"].description == "allot@lab: tier p2 interactive notebooks"
    assert qos["tier-p3"].preempt_mode == "requeue" and "tier-p3" in qos["guar-nlp"].preempt
    assert "tier-p2" not in qos["guar-nlp"].preempt and "tier-p0" not in qos
    accounts = {a.name: a for a in state.accounts}
    assert accounts["nlp"].qos == ("burst-nlp", "guar-nlp", "tier-p2", "tier-p3")
    assert accounts["nlp"].default_qos == "guar-nlp"  # a tier is never the default
    names = [q.name for q in state.qos]
    assert names.index("tier-p3") < names.index("guar-nlp")


def test_a_fresh_cluster_is_one_load_and_qos_calls_shared_by_equal_limits():
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    commands, _ = plan_slurm(state, [], [], [], descriptions={})
    steps = batch(commands, "lab")
    assert sum(len(s.commands) for s in steps) == len(commands)  # every object is covered exactly once
    [load] = [s for s in steps if s.load]
    assert load.argv == ("load",) and {c.kind for c in load.commands} == {"account", "user"}
    lines = load.load.splitlines()
    assert lines[1] == "Cluster - 'lab'"  # no settings: the cluster's own line is left alone
    assert lines.index("Parent - 'root'") < lines.index("Parent - 'acme'") < lines.index("Parent - 'nlp'")
    assert "User - 'dave':DefaultAccount='nlp':Fairshare=1" in lines
    qos_steps = [s for s in steps if not s.load]
    assert all(s.argv[:2] == ("add", "qos") for s in qos_steps)
    # burst-llm and burst-nlp... differ in GrpTRES; the order is still preemptees first
    first_guarantee = next(i for i, s in enumerate(qos_steps) if s.commands[0].name.startswith("guar-"))
    assert all(c.name.startswith("burst-") for s in qos_steps[:first_guarantee] for c in s.commands)
    assert steps.index(load) == len(steps) - 1


def test_equal_settings_share_a_call_and_modifies_set_only_what_differs():
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    qos = list(state.qos)
    # the cluster has every QOS, but burst-llm is missing from each guarantee's Preempt list and
    # guar-ops has the wrong GrpTRES
    actual = [
        SlurmQos(
            q.name,
            q.description,
            q.priority,
            tuple(p for p in q.preempt if p != "burst-llm"),
            q.preempt_mode,
            q.grace_time_s,
            q.preempt_exempt_s,
            q.usage_factor,
            {"gres/gpu:h100": 1} if q.name == "guar-ops" else q.grp_tres,
        )
        for q in qos
    ]
    accounts = [
        SlurmAccount(
            a.name, a.parent, a.fairshare + (1 if a.name in ("nlp", "llm") else 0), "", "", a.qos, a.default_qos
        )
        for a in state.accounts
    ]
    descriptions = {a.name: a.description for a in state.accounts}
    commands, refusals = plan_slurm(state, accounts, [], actual, descriptions=descriptions)
    assert refusals == []
    guarantees = [c for c in commands if c.kind == "qos"]
    assert {c.name for c in guarantees} == {q.name for q in qos if q.preempt}
    ops = next(c for c in guarantees if c.name == "guar-ops")
    assert [ch.path for ch in ops.changes] == ["preempt", "grptres"]
    assert ops.summary.startswith("preempt burst-nlp,burst-research → burst-llm,burst-nlp,burst-research")
    steps = batch(commands, "lab")
    shared = next(s for s in steps if s.argv[:2] == ("modify", "qos") and len(s.commands) > 1)
    assert shared.argv[3] == "name=guar-acme,guar-llm,guar-nlp,guar-research"
    assert shared.argv[4:] == ("set", "Preempt=burst-llm,burst-nlp,burst-research")  # nothing else is rewritten
    fairshare = [s for s in steps if s.argv[:2] == ("modify", "account")]
    assert [s.argv[3] for s in fairshare] == ["name=nlp", "name=llm"]  # different values: one call each
    assert fairshare[0].argv[-1] == "Fairshare=50"


def test_importing_a_sites_own_dump_maps_the_tree_and_says_what_it_could_not(fixtures):
    from quotas.policy.slurm.importer import parse_dump, read_slurm

    outputs = fixtures / "slurm-outputs"
    cluster, accounts, users = parse_dump((outputs / "sacctmgr-dump-lab.cfg").read_text())
    qos = parse_qos((outputs / "sacctmgr-P-show-qos.psv").read_text())
    plan = read_slurm(accounts, users, qos, flavors=["a100"])
    assert cluster == "lab"
    kinds = {u.name: (u.kind.value, u.parent) for u in plan.units.values()}
    assert kinds["acme"] == ("organisation", None) and kinds["research"] == ("department", "acme")
    assert kinds["nlp"] == ("team", "research") and kinds["llm-pretrain"] == ("project", "nlp")
    # guar-nlp's GrpTRES=gres/gpu=3 (untyped: the cluster's only flavor), summed up the tree
    guarantees = {u.name: u.guarantee for u in plan.units.values()}
    assert guarantees["nlp"] == {"a100": 3} and guarantees["research"] == {"a100": 5}
    assert guarantees["acme"] == {"a100": 8}
    assert plan.units["nlp"].weight == 50 and sorted(plan.units["nlp"].members) == ["alice", "dave"]
    assert not plan.units["nlp"].ours
    notes = "\n".join(plan.notes)
    assert "sacctmgr -i modify account where name=nlp set Description='team acme/research/nlp'" in notes
    losses = "\n".join(plan.losses)  # what the operator must accept before anything is imported
    assert "QOS burst: the site's own, not imported" in losses
    assert "QOS guar-nlp: named like Allot's, but its description" in losses  # the seed's, not Allot's
    two = read_slurm(accounts, users, qos, flavors=["a100", "h100"])
    assert two.units["nlp"].guarantee == {} and "a typed gres/gpu:<type> is needed" in "\n".join(two.notes)


def test_a_dump_that_is_not_one_is_refused_with_the_line():
    import pytest

    from quotas.policy.slurm.importer import parse_dump

    with pytest.raises(ValueError, match="line 2: 'Acount' is not a dump line"):
        parse_dump("Cluster - 'lab'\nAcount - 'x':Fairshare=1\n")
    with pytest.raises(ValueError, match="no \"Cluster - 'name'\" line"):
        parse_dump("Parent - 'root'\n")


def test_default_accounts_are_set_where_they_are_not_allots_choice_unless_the_site_chose():
    from quotas.policy.slurm.model import SlurmUser

    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    accounts = [*state.accounts, SlurmAccount("site-tools", "root", 1)]
    descriptions = {a.name: a.description for a in state.accounts} | {"site-tools": "the platform team's"}
    users = [
        SlurmUser("alice", "nlp", "nlp"),  # Allot wants llm (first of her accounts by name)
        SlurmUser("dave", "nlp", "gone-project"),  # an account that no longer exists
        SlurmUser("erin", "ops", "site-tools"),  # the site's choice: left alone
    ]
    commands, _ = plan_slurm(state, accounts, users, list(state.qos), descriptions=descriptions)
    modifies = [c for c in commands if c.kind == "user" and c.action == "modify"]
    assert [(c.name, c.summary) for c in modifies] == [
        ("alice", "defaultaccount nlp → llm"),
        ("dave", "defaultaccount gone-project → nlp"),
    ]
    steps = batch(commands, "lab")
    add = next(i for i, s in enumerate(steps) if s.argv[:3] == ("add", "user", "alice"))
    modify = next(i for i, s in enumerate(steps) if s.argv[:2] == ("modify", "user"))
    assert add < modify  # alice@llm exists before it becomes her default


def _as_read(state, **changes):
    """The cluster as ``show assoc`` / ``show qos`` would print ``state`` once applied (flags lowercased),
    with ``changes`` (name → fields) made out of band."""
    from dataclasses import replace

    qos = [replace(q, **{"flags": tuple(f.lower() for f in q.flags), **changes.get(q.name, {})}) for q in state.qos]
    accounts = [replace(a, **changes.get(a.name, {})) for a in state.accounts]
    return accounts, qos, {a.name: a.description for a in state.accounts}


def test_a_sites_qos_with_one_of_our_names_or_prefixes_is_never_changed_or_deleted():
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    accounts, qos, descriptions = _as_read(state)
    rogue = SlurmQos("guar-rogue", "site: reserved for the vendor", 50)  # not Allot's: its description says so
    stale = SlurmQos("burst-gone", "allot: borrowed gpus, requeued on reclaim", 10)  # Allot's, no longer wanted
    hijacked = SlurmQos("guar-ops", "hand-made by an admin", 5, grp_tres={"gres/gpu:h100": 1})
    qos = [q for q in qos if q.name != "guar-ops"] + [rogue, stale, hijacked]
    commands, refusals = plan_slurm(state, accounts, state.users, qos, descriptions=descriptions)
    deleted = [c.name for c in commands if c.action == "delete"]
    assert deleted == ["burst-gone"]  # guar-rogue stays: a name prefix does not make a QOS ours
    assert not [c for c in commands if c.name == "guar-ops"]
    [refused] = refusals
    assert (refused.kind, refused.name) == ("qos", "guar-ops") and "not created by Allot" in refused.message


def test_another_clusters_qos_in_the_same_slurmdbd_is_never_changed_deleted_or_given_to_an_account():
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    accounts, qos, descriptions = _as_read(state)
    theirs = SlurmQos("guar-nlp", "allot@west: guaranteed gpus", 1000, grp_tres={"gres/gpu:a100": 9})
    unused = SlurmQos("guar-astro", "allot@west: guaranteed gpus", 1000)  # not wanted here: not ours to delete
    legacy = SlurmQos("burst-old", "allot: borrowed gpus, requeued on reclaim", 10)  # before owners were named
    listed = SlurmQos("burst-kept", "allot: borrowed gpus, requeued on reclaim", 10)  # another cluster lists it
    qos = [q for q in qos if q.name != "guar-nlp"] + [theirs, unused, legacy, listed]
    commands, refusals = plan_slurm(
        state, accounts, state.users, qos, descriptions=descriptions, elsewhere=frozenset({"burst-kept"})
    )
    assert [c.name for c in commands if c.kind == "qos" and c.action == "delete"] == ["burst-old"]
    assert not [c for c in commands if c.name == "guar-nlp"]
    [refused] = refusals
    assert refused.name == "guar-nlp" and "belongs to Allot's cluster west" in refused.message
    assert "QOS prefix" in refused.message
    fresh, _ = plan_slurm(state, [], [], qos, descriptions={}, elsewhere=frozenset())  # a cluster with no accounts yet
    kept, held = hold_back(state, fresh, {"guar-nlp": refused.message}, "not ours")
    assert not [c for c in kept if c.kind == "account" and c.name in ("nlp", "llm")]
    assert "nlp" in {p.name for p in held if p.kind == "account"}  # nlp would list west's guar-nlp
    assert "llm" in {p.name for p in held if p.kind == "account"}  # and what is under it waits with it


def test_a_qos_prefix_names_every_qos_and_descriptions_name_their_cluster():
    from dataclasses import replace

    snapshot, target = tree()
    state = compile_slurm(snapshot, replace(target, qos_prefix="b-"))
    assert state.qos and all(q.name.startswith("b-") for q in state.qos)
    assert all(q.description.startswith(f"allot@{target.cluster}: ") for q in state.qos)
    assert all(n.startswith("b-") for a in state.accounts for n in a.qos)


def test_a_hand_made_site_imports_with_every_setting_it_cannot_carry_listed():
    """Issue #24.7: a site tier QOS outside Allot's rule, account limits, a site QOS named like Allot's."""
    from quotas.policy.slurm.importer import parse_dump, read_slurm

    astro = (
        "Account - 'astro':Description='astronomy':Organization='uni':Fairshare=10:GrpTRES=gres/gpu:a100=4:"
        "MaxJobs=20:QOS='guar-astro,tier-debug,long':Priority=7"
    )
    dump = f"""Cluster - 'hpc'
Parent - 'root'
{astro}
Parent - 'astro'
Account - 'survey':Description='survey':Organization='uni':Fairshare=5:MaxTRESPerJob=gres/gpu:a100=2:MaxJobs=20
Parent - 'survey'
User - 'ann':DefaultAccount='survey':MaxJobs=3
User - 'bea':DefaultAccount='survey':Fairshare=4:QOS='normal':DefaultQOS='normal'
User - 'bea':Partition='gpu':DefaultAccount='survey':Priority=9
"""
    cluster, accounts, users = parse_dump(dump)
    qos = [
        SlurmQos("guar-astro", "hand-made by the admins", 500, grp_tres={"gres/gpu:a100": 3}),
        SlurmQos("tier-debug", "debug queue", 100, max_wall_min=30),
        SlurmQos("long", "long jobs", 10, max_wall_min=2880, limits={"maxtresperuser": "gres/gpu=2"}),
    ]
    plan = read_slurm(accounts, users, qos, flavors=["a100"])  # nothing aborts
    assert cluster == "hpc" and set(plan.units) == {"astro", "survey"} and plan.tiers == {}
    losses = "\n".join(plan.losses)
    assert "account astro: GrpTRES=gres/gpu:a100=4 is not carried over" in losses
    assert "account astro: MaxJobs=20" in losses
    assert "account survey: MaxTRES=gres/gpu:a100=2" in losses
    assert "account survey: MaxJobs" not in losses  # astro's, repeated on its child
    assert "user ann in survey: MaxJobs=3" in losses
    # issue #41: a user association's own Fairshare, QOS and DefaultQOS are listed too
    assert "user bea in survey: Fairshare=4 is not carried over" in losses
    assert "user bea in survey: QOS=normal is not carried over" in losses
    assert "user bea in survey: DefaultQOS=normal is not carried over" in losses
    assert "user ann in survey: Fairshare" not in losses and "user ann in survey: QOS" not in losses
    # …and partition associations, association priorities and what a site QOS limits
    assert "user bea in survey: the association for partition gpu is not carried over" in losses
    assert "user bea in survey: Priority=9 is not carried over" in losses
    assert "account astro: Priority=7 is not carried over" in losses
    assert (
        "QOS long: the site's own, not imported; Allot gives each unit guar-<account> and burst-<account> QOS "
        "(set guarantee and burst per unit) and keeps QOS it did not create; its MaxTRESPerUser=gres/gpu=2, "
        "MaxWall=2880 min will no longer limit the jobs of astro"
    ) in losses
    assert "QOS guar-astro: named like Allot's, but its description 'hand-made by the admins'" in losses
    assert "QOS tier-debug: named like Allot's" in losses and "not imported as a tier" in losses
    assert plan.units["astro"].weight == 10 and plan.units["survey"].members == ["ann", "bea"]
    assert plan.units["astro"].guarantee == {"a100": 3}


def test_a_user_associations_own_limits_and_fairshare_are_drift_and_are_reset():
    from dataclasses import replace

    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    first = next(u for u in state.users if u.name == "alice")
    accounts, qos, descriptions = _as_read(state, **{first.account: {"limits": {"maxwall": "1-00:00:00"}}})
    users = [
        replace(u, fairshare=7, limits={"maxjobs": "2", "maxwall": "1-00:00:00"}) if u == first else u
        for u in state.users
    ]
    commands, _ = plan_slurm(state, accounts, users, qos, descriptions=descriptions)
    [drift] = [c for c in commands if c.kind == "user" and c.action == "modify" and c.name.startswith("alice@")]
    assert {c.path for c in drift.changes} == {"fairshare", "limits"}
    limits = next(c for c in drift.changes if c.path == "limits")
    assert limits.actual == {"maxjobs": "2"}  # MaxWall is the account's, shown on the user too
    assert drift.argv[:6] == ("modify", "user", "where", "name=alice", f"account={drift.name.split('@')[1]}",
                              f"cluster={state.cluster}")  # fmt: skip
    assert set(drift.argv[7:]) == {"Fairshare=1", "MaxJobs=-1"}
    [step] = batch([drift], state.cluster)
    assert step.argv == drift.argv


def test_a_user_associations_own_qos_and_default_qos_are_drift_and_are_reset_to_its_accounts():
    """Issue #41: `sacctmgr modify user where name=alice account=… set QOS+=normal DefaultQOS=normal` let her
    jobs without --qos run under normal, outside every Allot limit; it was neither drift nor corrected.
    `show assoc` prints the account's QOS on a user that sets none: those are not drift."""
    from dataclasses import replace

    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    accounts, qos, descriptions = _as_read(state)
    by_account = {a.name: a for a in accounts}
    first = next(u for u in state.users if u.name == "alice" and by_account[u.account].qos)
    account = by_account[first.account]
    inherited = [replace(u, qos=by_account[u.account].qos, default_qos=by_account[u.account].default_qos)
                 for u in state.users]  # fmt: skip
    commands, _ = plan_slurm(state, accounts, inherited, qos, descriptions=descriptions)
    assert [c for c in commands if c.kind == "user"] == []  # as read on every user: no drift
    users = [
        replace(u, qos=tuple(sorted((*account.qos, "normal"))), default_qos="normal") if u == first else u
        for u in inherited
    ]
    commands, _ = plan_slurm(state, accounts, users, qos, descriptions=descriptions)
    [drift] = [c for c in commands if c.kind == "user"]
    assert drift.name == f"alice@{first.account}" and {c.path for c in drift.changes} == {"qos", "defaultqos"}
    assert set(drift.argv[7:]) == {"QOS=", "DefaultQOS=-1"}  # cleared: she inherits the account's again
    assert {c.path: c.desired for c in drift.changes} == {"qos": account.qos, "defaultqos": account.default_qos}


def test_an_account_the_slurmdbd_holds_as_a_sites_is_never_added_on_another_cluster():
    """Issue #41: an account's Description and Organization are one slurmdbd record for every cluster.
    A site's units imported into Allot (with members) were given accounts on every other Slurm cluster,
    which rewrote the site's descriptions (and the site's next sync took them for Allot's) and moved
    members' default accounts there. An account this cluster lacks whose name the slurmdbd holds with a
    description Allot did not write is left out, with its subtree, members and QOS."""
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    assert {u.default_account for u in state.users if u.name == "alice"} == {"llm"}  # her first account
    descriptions = {"llm": "lensing (the site's own)"}  # on another cluster of the slurmdbd
    commands, refusals = plan_slurm(state, [], [], [], descriptions=descriptions)
    assert [(p.kind, p.name) for p in refusals] == [("account", "llm")]
    assert "not added on" in refusals[0].message and "one record for every cluster" in refusals[0].message
    added = {(c.kind, c.name) for c in commands if c.action == "add"}
    assert ("account", "nlp") in added and ("account", "llm") not in added
    assert ("user", "alice@llm") not in added and ("qos", "guar-llm") not in added
    alice = next(c for c in commands if (c.kind, c.name) == ("user", "alice@nlp"))
    assert "DefaultAccount=nlp" in alice.argv  # her default is among the accounts left
    ours = {"llm": "project acme/research/nlp/llm"}  # Allot's own record (written by another Allot cluster)
    commands, refusals = plan_slurm(state, [], [], [], descriptions=ours)
    assert refusals == [] and ("account", "llm") in {(c.kind, c.name) for c in commands if c.action == "add"}


def test_limits_allot_never_sets_on_its_accounts_and_qos_are_drift_and_are_cleared():
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    accounts, qos, descriptions = _as_read(
        state,
        nlp={"limits": {"grptres": "gres/gpu:h100=1", "maxjobs": "1"}},
        **{"guar-research": {"flags": ("denyonlimit",), "limits": {"maxtresperuser": "gres/gpu:h100=1"}}},
    )
    commands, refusals = plan_slurm(state, accounts, state.users, qos, descriptions=descriptions)
    assert refusals == []
    by_name = {c.name: c for c in commands}
    assert set(by_name) == {"nlp", "guar-research"}  # nothing else drifted
    nlp = by_name["nlp"]
    assert [(c.path, c.desired, c.actual) for c in nlp.changes] == [
        ("limits", {}, {"grptres": "gres/gpu:h100=1", "maxjobs": "1"})
    ]
    assert nlp.argv[-2:] == ("GrpTRES=gres/gpu:h100=-1", "MaxJobs=-1")
    guar = by_name["guar-research"]
    assert [c.path for c in guar.changes] == ["flags", "limits"]
    assert guar.argv[-2:] == ("Flags=-1", "MaxTRESPerUser=gres/gpu:h100=-1")
    accounts, qos, _ = _as_read(state)
    again, _ = plan_slurm(state, accounts, state.users, qos, descriptions=descriptions)
    assert again == []  # once cleared: in sync


def test_a_tier_qos_refuses_at_submission_what_it_would_leave_pending_forever():
    snapshot, target = tree()
    tiers = {"P2": Tier("P2", 1000, False, 4 * 3600, display_name="Interactive")}
    state = compile_slurm(snapshot.__class__(**{**snapshot.__dict__, "tiers": tiers}), target)
    tier = next(q for q in state.qos if q.name == "tier-p2")
    assert tier.flags == ("DenyOnLimit",) and all(not q.flags for q in state.qos if q is not tier)
    assert "Flags=DenyOnLimit" in qos_script(state)
    accounts, qos, descriptions = _as_read(state, **{"tier-p2": {"flags": ()}})  # someone removed the flag
    [fix] = plan_slurm(state, accounts, state.users, qos, descriptions=descriptions)[0]
    assert fix.argv == ("modify", "qos", "where", "name=tier-p2", "set", "Flags=DenyOnLimit")


def test_an_account_that_sets_no_qos_of_its_own_is_not_read_as_holding_its_parents_guarantee():
    """``show assoc`` prints inherited QOS lists: a site account under nlp shows burst-nlp,guar-nlp."""
    from dataclasses import replace

    from quotas.policy.slurm.diff import effective_qos
    from quotas.policy.slurm.importer import read_slurm

    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    shown = effective_qos(state.accounts)
    accounts = [replace(a, qos=shown[a.name]) for a in state.accounts]
    sitex = SlurmAccount("sitex", "nlp", 1, "", "", shown["nlp"], "")  # sacctmgr add account sitex parent=nlp
    descriptions = {a.name: a.description for a in state.accounts}
    before = read_slurm(accounts, [], state.qos, flavors=["h100", "a100"], descriptions=descriptions)
    after = read_slurm([*accounts, sitex], [], state.qos, flavors=["h100", "a100"], descriptions=descriptions)
    assert after.units["sitex"].guarantee == {} and after.units["sitex"].burst == {}
    for name in ("acme", "research", "nlp"):
        assert after.units[name].guarantee == before.units[name].guarantee  # nlp's not counted twice
    assert before.units["nlp"].guarantee == {"h100": 24, "a100": 2}


def _usable(state, account_names, gpu):
    """What the guarantee and burst QOS of these accounts add up to, for one GPU type."""
    qos = {q.name: q for q in state.qos}
    return sum(
        qos[n].grp_tres.get(f"gres/gpu:{gpu}", 0)
        for a in account_names
        for n in (f"guar-{a}", f"burst-{a}")
        if n in qos
    )


def test_strict_subtree_ceilings_split_a_parents_burst_among_its_subtree():
    """Issue #16.7: research (ceiling 50 H100) had guar + burst QOS adding up to 40 + 10 + 8 + 4 = 62
    in its subtree. Strict (the default): research's burst of 10 is shared by research, nlp and llm."""
    snapshot, target = tree()
    loose = compile_slurm(snapshot, dataclasses.replace(target, strict=False))
    assert _usable(loose, ("research", "nlp", "llm"), "h100") == 62
    assert [(o.path, o.gpu_type, o.usable, o.ceiling) for o in subtree_overcommit(snapshot, loose, target)] == [
        ("acme/research", "a100", 4, 0),  # research holds no A100: nlp's 2 + 2 were never research's to give
        ("acme/research", "h100", 62, 50),
        ("acme/research/nlp", "h100", 36, 32),
    ]
    state = compile_slurm(snapshot, target)
    qos = {q.name: q for q in state.qos}
    # nlp asks 8 of research's 10 (fits: research keeps 2); llm asks 4 of nlp's 8 (fits: nlp keeps 4)
    assert qos["burst-research"].grp_tres == {"gres/gpu:h100": 2, "gres/gpu": 2}
    assert qos["burst-nlp"].grp_tres == {"gres/gpu:h100": 4, "gres/gpu": 4}
    assert qos["burst-llm"].grp_tres == {"gres/gpu:h100": 4, "gres/gpu": 4}
    assert _usable(state, ("research", "nlp", "llm"), "h100") == 50
    assert _usable(state, ("nlp", "llm"), "h100") == 32
    # what is left is nlp's A100 *guarantee* under a research without A100 — a tree the invariants refuse
    # (this fixture is never validated); bursts alone no longer exceed anything
    assert [(o.path, o.gpu_type, o.usable) for o in subtree_overcommit(snapshot, state, target)] == [
        ("acme/research", "a100", 2)
    ]
    # acme's ceiling is the whole flavor (64 of 64 H100): it cannot be exceeded, nothing is split there
    assert "burst-acme" not in qos and qos["guar-acme"].grp_tres["gres/gpu:h100"] == 16


def test_when_children_ask_more_than_the_parent_has_they_share_it_in_proportion():
    b = TreeBuilder()
    b.flavor(A100, 100)
    org = b.unit("org", UnitKind.ORGANISATION)
    dept = b.unit("dept", UnitKind.DEPARTMENT, org)
    kids = [b.unit(f"t{i}", UnitKind.TEAM, dept) for i in range(3)]
    b.quota(org, A100, Resource.GPU, 100)
    b.quota(dept, A100, Resource.GPU, 30, 10)
    for kid, burst in zip(kids, (8, 4, 4), strict=True):
        b.quota(kid, A100, Resource.GPU, 10, burst)
    target = SlurmTarget("lab", (SlurmFlavor(A100, "a100"),))
    qos = {q.name: q for q in compile_slurm(b.build(), target).qos}
    # 16 asked of 10: 5, 2.5, 2.5 → 5, 3, 2 (largest remainders, ties by id); dept keeps nothing of its own
    assert [qos[f"burst-t{i}"].grp_tres["gres/gpu:a100"] for i in range(3)] == [5, 3, 2]
    assert "burst-dept" not in qos


def _valid_tree(data):
    """Any valid tree on 1000 A100 (children's ceilings within their parent's, guarantees within the parent's)."""
    b = TreeBuilder()
    b.flavor(A100, 1000)
    root = b.unit("org", UnitKind.ORGANISATION)
    b.quota(root, A100, Resource.GPU, 200, data.draw(st.integers(0, 100)))
    todo, made = [(root, 200, 200 + b.quotas[(root, A100, Resource.GPU)].burst)], 1
    while todo and made < 14:
        parent, guarantee, ceiling = todo.pop(0)
        for _ in range(data.draw(st.integers(0, 3))):
            g = data.draw(st.integers(0, guarantee))
            guarantee -= g
            burst = data.draw(st.integers(0, ceiling - g))
            kid = b.unit(f"u{made}", UnitKind.TEAM, parent)
            made += 1
            b.quota(kid, A100, Resource.GPU, g, burst)
            todo.append((kid, g, g + burst))
    return b.build()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_strict_compiling_never_lets_a_subtree_exceed_its_ceiling(data):
    """Strict compiling leaves no subtree whose QOS add up to more than its ceiling, and never gives a
    unit a burst QOS larger than its burst."""
    snapshot = _valid_tree(data)
    target = SlurmTarget("lab", (SlurmFlavor(A100, "a100"),))
    state = compile_slurm(snapshot, target)
    assert subtree_overcommit(snapshot, state, target) == []
    qos = {q.name: q for q in state.qos}
    for uid, unit in snapshot.units.items():
        own = qos.get(f"burst-{unit.slug}")
        assert (own.grp_tres["gres/gpu:a100"] if own else 0) <= snapshot.quota(uid, A100, Resource.GPU).burst


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_strictly_compiled_tree_read_back_compiles_to_the_same_qos(data):
    """Importing what strict compiling wrote (each unit's burst = its subtree's burst QOS added up)
    and compiling that again changes no QOS: an import followed by a sync is a no-op."""
    from quotas.policy.slurm.importer import read_slurm

    target = SlurmTarget("lab", (SlurmFlavor(A100, "a100"),))
    state = compile_slurm(_valid_tree(data), target)
    plan = read_slurm(state.accounts, [], state.qos, flavors=["a100"], split_from={"a100": 1000})
    b = TreeBuilder()
    b.flavor(A100, 1000)
    ids: dict[str, int] = {}
    for unit in plan.top_down():
        ids[unit.name] = b.unit(unit.name, unit.kind, ids[unit.parent] if unit.parent else None)
        guarantee, burst = unit.guarantee.get("a100", 0), unit.burst.get("a100", 0)
        if guarantee or burst:
            b.quota(ids[unit.name], A100, Resource.GPU, guarantee, burst)
    again = compile_slurm(b.build(), target)
    assert sorted((q.name, q.grp_tres) for q in again.qos) == sorted((q.name, q.grp_tres) for q in state.qos)


def test_coverage_says_how_subtree_ceilings_are_held_and_where_permissive_ones_are_not():
    snapshot, target = tree()
    strict = slurm_coverage(snapshot, compile_slurm(snapshot, target), target)
    line = next(c for c in strict if c.term == "subtree ceiling")
    assert (line.value, line.how) == ("strict", "enforced_by_slurm")
    assert not [c for c in strict if c.subject.startswith("unit ")]
    loose_target = dataclasses.replace(target, strict=False)
    loose = slurm_coverage(snapshot, compile_slurm(snapshot, loose_target), loose_target)
    assert next(c for c in loose if c.term == "subtree ceiling").how == "not_enforced"
    assert [(c.subject, c.value) for c in loose if c.subject.startswith("unit ")] == [
        ("unit acme/research", "its QOS add up to 4 A100 GPUs, ceiling 0"),
        ("unit acme/research", "its QOS add up to 62 H100 GPUs, ceiling 50"),
        ("unit acme/research/nlp", "its QOS add up to 36 H100 GPUs, ceiling 32"),
    ]
    terms = {(c.subject, c.term): c.how for c in strict}
    assert terms[("contract std", "grace_period")] == "enforced_by_slurm"
    assert terms[("quota", "per-job ceiling")] == "enforced_by_allot_job_submit"
