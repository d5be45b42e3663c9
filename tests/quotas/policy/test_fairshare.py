"""Fair-share against the seed's worked numbers and a real `sshare -a -l -P` capture."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from quotas.policy import UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.fairshare import (
    MAX_INT64,
    ShareNode,
    UsageRecord,
    accrued_weight,
    classic_factor,
    decay_factor,
    decayed_usage,
    dominant_share,
    drf_progressive_filling,
    fair_tree,
    kueue_weighted_share,
    normalized_shares,
    slurm_share_nodes,
    subtree_usage,
)

NOW = datetime(2026, 11, 1, tzinfo=UTC)
WEEK = timedelta(days=7)


def test_seed_half_life_two_week_old_usage_counts_25_percent():
    assert decay_factor(2 * WEEK, WEEK) == pytest.approx(0.25)
    usage = decayed_usage([UsageRecord(1, NOW - 2 * WEEK, 100.0), UsageRecord(1, NOW, 10.0)], now=NOW, half_life=WEEK)
    assert usage[1] == pytest.approx(25.0 + 10.0)


def test_future_usage_is_not_inflated():
    assert decay_factor(-WEEK, WEEK) == 1.0
    assert decayed_usage([UsageRecord(1, NOW + WEEK, 5.0)], now=NOW, half_life=WEEK)[1] == 5.0


def test_decayed_usage_refuses_a_zero_half_life():
    with pytest.raises(ValueError, match="half_life"):
        decayed_usage([], now=NOW, half_life=timedelta(0))


# Seed chapter 8, table 1: 8 GPUs, 32 cores, 256 GB, 80 Gb/s.
CAPACITY = {"gpu": 8, "cpu": 32, "mem": 256, "net": 80}
DEMANDS = {"A": {"gpu": 1, "cpu": 4, "mem": 32, "net": 10}, "B": {"gpu": 2, "cpu": 2, "mem": 16, "net": 20}}


def test_seed_table_1_progressive_filling_gives_4_replicas_and_2_workers():
    assert drf_progressive_filling(DEMANDS, CAPACITY) == {"A": 4, "B": 2}


def test_seed_table_1_both_tenants_reach_a_dominant_share_of_one_half():
    a = {r: 4 * d for r, d in DEMANDS["A"].items()}
    b = {r: 2 * d for r, d in DEMANDS["B"].items()}
    assert dominant_share(a, CAPACITY)[0] == pytest.approx(0.50)
    assert dominant_share(b, CAPACITY)[0] == pytest.approx(0.50)
    # the per-resource shares of the table
    assert {r: a[r] / CAPACITY[r] for r in a} == {"gpu": 0.5, "cpu": 0.5, "mem": 0.5, "net": 0.5}
    assert {r: b[r] / CAPACITY[r] for r in b} == {"gpu": 0.5, "cpu": 0.125, "mem": 0.125, "net": 0.5}


def _tree():
    b = TreeBuilder()
    b.flavor("c/a100", 8)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    research = b.unit("research", UnitKind.DEPARTMENT, acme, weight=60)
    prod = b.unit("prod", UnitKind.DEPARTMENT, acme, weight=40)
    nlp = b.unit("nlp", UnitKind.TEAM, research, weight=50)
    vision = b.unit("vision", UnitKind.TEAM, research, weight=50)
    serving = b.unit("serving", UnitKind.TEAM, prod, weight=100)
    return b.build(), {
        "acme": acme,
        "research": research,
        "prod": prod,
        "nlp": nlp,
        "vision": vision,
        "serving": serving,
    }


def test_normalized_shares_multiply_down_the_tree():
    snapshot, u = _tree()
    shares = normalized_shares(snapshot)
    assert shares[u["acme"]] == 1.0
    assert shares[u["research"]] == pytest.approx(0.6)
    assert shares[u["nlp"]] == pytest.approx(0.3)
    assert shares[u["serving"]] == pytest.approx(0.4)


def test_subtree_usage_and_classic_factor():
    snapshot, u = _tree()
    own = {u["nlp"]: 30.0, u["vision"]: 0.0, u["serving"]: 70.0}
    totals = subtree_usage(snapshot, own)
    assert totals[u["research"]] == 30.0 and totals[u["acme"]] == 100.0
    factor = classic_factor(snapshot, own)
    assert factor[u["vision"]] == 1.0  # no usage
    assert factor[u["nlp"]] == pytest.approx(2 ** (-0.3 / 0.3))  # used exactly its share → 0.5
    assert factor[u["serving"]] == pytest.approx(2 ** (-0.7 / 0.4))


def test_fair_tree_ranks_users_underserved_first_and_accounts_without_users_rank_nobody():
    """Issue #16.8: an account with no users is no leaf (Slurm ranks user associations only): counting
    it would make every factor rank / 4 instead of rank / 3."""
    nodes = slurm_share_nodes(
        [("acme", "root", 100), ("research", "acme", 60), ("prod", "acme", 40), ("nlp", "research", 50),
         ("vision", "research", 50), ("serving", "prod", 100), ("empty", "prod", 10)],
        [("alice", "nlp", 1), ("bob", "vision", 1), ("carol", "serving", 1)],
        {("nlp", "alice"): 30.0, ("serving", "carol"): 70.0},
    )  # fmt: skip
    lines = fair_tree(nodes)
    factors = {k: v.factor for k, v in lines.items() if v.factor is not None}
    # 4 users (the root user included): root (unused, ∞ at the top) 4/4; then acme's subtree:
    # research (0.6 / 0.3) before prod (0.4 / 0.7); in research vision (unused) before nlp
    assert factors == {
        ("user", "root", "root"): 1.0,
        ("user", "vision", "bob"): 0.75,
        ("user", "nlp", "alice"): 0.5,
        ("user", "serving", "carol"): 0.25,
    }
    assert lines[("account", "research")].level_fs == pytest.approx(0.6 / 0.3)
    assert lines[("account", "empty")].factor is None and lines[("account", "empty")].level_fs == math.inf


def test_user_associations_sit_beside_child_accounts():
    """Issue #16.8: nlp has a member (alice, shares 1) and a child account llm (shares 70): alice's
    NormShares is 1/71 among nlp's children, not 1 (as if users had a level of their own)."""
    nodes = slurm_share_nodes(
        [("nlp", "root", 50), ("llm", "nlp", 70)],
        [("alice", "nlp", 1), ("dave", "llm", 1)],
        {("nlp", "alice"): 10.0, ("llm", "dave"): 10.0},
    )
    lines = fair_tree(nodes)
    assert lines[("user", "nlp", "alice")].norm_shares == pytest.approx(1 / 71)
    assert lines[("account", "llm")].norm_shares == pytest.approx(70 / 71)
    assert lines[("user", "nlp", "alice")].effective_usage == pytest.approx(0.5)
    assert lines[("account", "nlp")].norm_shares == pytest.approx(50 / 51)  # beside the root user


def test_users_tied_on_level_fs_share_a_rank_and_tied_accounts_are_walked_as_one():
    """Slurm's fair_tree.c: equal LevelFS → equal rank; sibling accounts tied on LevelFS have their
    children merged and ranked together."""
    nodes = slurm_share_nodes(
        [("a", "root", 1), ("b", "root", 1)],
        [("u1", "a", 1), ("u2", "a", 1), ("u3", "b", 1), ("u4", "b", 1)],
        {("a", "u1"): 5.0, ("b", "u3"): 4.0, ("b", "u4"): 1.0},
    )
    lines = fair_tree(nodes)
    factors = {k[2]: v.factor for k, v in lines.items() if v.factor is not None and isinstance(k, tuple)}
    # 5 users. The root user is unused (∞): 5/5. a and b tie (1/3 ÷ 1/2 each): their children are
    # ranked together — u2 ∞, u4 0.5 ÷ 0.2 = 2.5, u3 0.5 ÷ 0.8 = 0.625, u1 0.5 ÷ 1 — where walking a,
    # then b, would rank u1 before u4
    assert lines[("account", "a")].level_fs == lines[("account", "b")].level_fs == pytest.approx(2 / 3)
    assert factors == {
        "root": 1.0,
        "u2": pytest.approx(0.8),
        "u4": pytest.approx(0.6),
        "u3": pytest.approx(0.4),
        "u1": pytest.approx(0.2),
    }
    tie = fair_tree(slurm_share_nodes([("a", "root", 1)], [("x", "a", 1), ("y", "a", 1)], {}))
    assert tie[("user", "a", "x")].factor == tie[("user", "a", "y")].factor == 1.0  # all unused: one rank


def test_usage_accrued_over_a_span_decays_like_slurms():
    week = 7 * 86400.0
    assert accrued_weight(0, 0, week, week) == pytest.approx(0.5)
    # a job that ran for the whole week before now: the mean of 2^(−age/week) over ages 0..1 week
    assert accrued_weight(0, week, week, week) == pytest.approx(1 / (2 * math.log(2)))
    assert accrued_weight(10, 20, 5, week) == 1.0  # not yet accrued counts in full


def parse_sshare(text):
    """Rows of `sshare -a -l -P` as (key, parent key, fields): leading spaces give the depth; user rows
    have a User. An account's key is ("acct", name), a user's (account, user)."""
    rows = []
    stack: list[tuple[int, object]] = []
    lines = text.splitlines()
    header = lines[0].split("|")
    for line in lines[1:]:
        depth = len(line) - len(line.lstrip(" "))
        fields = dict(zip(header, line.strip().split("|"), strict=False))
        if fields["Account"] == "root" and not fields["User"]:
            continue  # the root line is the tree itself
        key = (fields["Account"], fields["User"]) if fields["User"] else ("acct", fields["Account"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        rows.append((key, parent, fields))
        if not fields["User"]:
            stack.append((depth, key))
    return rows


def test_fair_tree_matches_a_real_sshare(fixtures):
    """Feed the leaves' usage and the raw shares of a real capture; every NormShares, EffectvUsage,
    LevelFS and user FairShare the algorithm computes must equal what Slurm printed.

    The leaves' usage is their NormUsage: in this capture RawUsage was read in a later decay pass
    than the normalised figures (prod: RawUsage 5749/22210 = 0.259, NormUsage 0.2787, with
    PriorityCalcPeriod=1 and jobs running), and Slurm ranks on the normalised usage.
    """
    rows = parse_sshare((fixtures / "slurm-outputs/sshare-a-l-P.psv").read_text())
    nodes = [
        ShareNode(key, parent, float(f["RawShares"]), float(f["NormUsage"]) if f["User"] else 0.0, user=bool(f["User"]))
        for key, parent, f in rows
    ]
    lines = fair_tree(nodes)
    compared = 0
    for key, _, f in rows:
        line = lines[key]
        assert line.norm_shares == pytest.approx(float(f["NormShares"]), abs=1e-6), key
        assert line.effective_usage == pytest.approx(float(f["EffectvUsage"]), abs=1e-6), key
        expected_level = math.inf if f["LevelFS"] == "inf" else float(f["LevelFS"])
        assert line.level_fs == pytest.approx(expected_level, rel=1e-5), key
        if f["User"]:
            assert line.factor == pytest.approx(float(f["FairShare"]), abs=1e-6), key
            compared += 1
    assert compared == 7  # every user association of the capture


def test_kueue_weighted_share_hand_checked():
    # 12 GPUs used on a quota of 8 → 4 borrowed; 40 lendable in the cohort → 100 ‰; weight 2 → 50
    share = kueue_weighted_share(
        usage={"a100|gpu": 12, "a100|cpu": 10},
        quota={"a100|gpu": 8, "a100|cpu": 64},
        lendable={"gpu": 40, "cpu": 256},
        weight=2,
    )
    assert share == 50
    # two flavors add up per resource; the dominant resource wins; rounding is up
    share = kueue_weighted_share(
        usage={"a100|gpu": 9, "v100|gpu": 5, "a100|cpu": 100},
        quota={"a100|gpu": 8, "v100|gpu": 4, "a100|cpu": 64},
        lendable={"gpu": 30, "cpu": 120},
        weight=1,
    )
    assert share == math.ceil(max(2 * 1000 / 30, 36 * 1000 / 120))


def test_kueue_weighted_share_edges():
    assert kueue_weighted_share(usage={"f|gpu": 4}, quota={"f|gpu": 8}, lendable={"gpu": 10}, weight=1) == 0
    assert kueue_weighted_share(usage={"f|gpu": 9}, quota={"f|gpu": 8}, lendable={"gpu": 10}, weight=0) == MAX_INT64
