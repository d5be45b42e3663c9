"""Admission under GPU-hour budgets: a spent deny budget refuses new work of its tiers on its flavor,
naming the budget and when it resets; past the warn threshold a workload is admitted with a warning;
a pod of an already admitted job is never refused."""

from dataclasses import replace
from datetime import UTC, datetime

from admission.policy.decide import MAX_WARNING, Reason, decide
from quotas.policy.budgets import Budget, BudgetAction, BudgetSpend
from tests.admission.policy.test_decide import A80, compiled, job, request, tree

AT = datetime(2026, 5, 19, 9, tzinfo=UTC)


def policy(action=BudgetAction.DENY, spent=1020.0, tiers=("P1", "P2", "P3"), at=AT):
    """test_decide's tree, with a 1,000 device-hour a100-80gb budget on ml (nlp's department)."""
    b, ml, nlp = tree()
    snapshot = replace(
        b.build(),
        budgets={(ml, A80): Budget(ml, A80, 1000, action=action, tiers=tiers)},
        budget_spend={(ml, A80): BudgetSpend(datetime(2026, 5, 1, tzinfo=UTC), 1000.0, spent)},
    )
    return compiled(snapshot, nlp, ("nlp",), at=at)


def pinned(flavor):
    return job(pod={"nodeSelector": {"gpu": flavor}})


def test_a_spent_deny_budget_refuses_new_work_on_its_flavor_naming_it():
    decision = decide(policy(), request(pinned("a100-80gb")))
    assert (decision.allowed, decision.reason) == (False, Reason.BUDGET_SPENT)
    assert "acme/ml has spent its month a100-80gb budget (1,020 of 1,000 device-hours)" in decision.message
    assert "refused until 2026-06-01, when it resets, or until it is raised in Allot" in decision.message
    # an unpinned job may land on the budget's flavor: refused too; one pinned to the other flavor is not
    assert decide(policy(), request(job())).reason is Reason.BUDGET_SPENT
    assert decide(policy(), request(pinned("a100-40gb"))).allowed


def test_tiers_outside_the_budget_and_next_period_are_admitted():
    assert decide(policy(tiers=("P2", "P3")), request(pinned("a100-80gb"))).allowed
    assert decide(policy(at=datetime(2026, 6, 1, 0, 5, tzinfo=UTC)), request(pinned("a100-80gb"))).allowed


def test_a_hold_that_covers_every_tier_is_the_queues_job_not_the_webhooks():
    # the LocalQueue holds it (stopPolicy: Hold): admitted here, queued there
    assert decide(policy(BudgetAction.HOLD), request(pinned("a100-80gb"))).allowed
    # a hold sparing a tier cannot be a queue stop: the webhook refuses the covered tiers instead
    spared = decide(policy(BudgetAction.HOLD, tiers=("P1",)), request(pinned("a100-80gb")))
    assert spared.reason is Reason.BUDGET_SPENT


def test_past_the_warn_threshold_it_is_admitted_with_a_warning():
    decision = decide(policy(BudgetAction.REPORT, spent=850.0), request(pinned("a100-80gb")))
    assert decision.allowed and decision.reason is Reason.ALLOWED
    (warning,) = decision.warnings
    assert warning == "acme/ml spent 85% of its a100-80gb budget (850/1,000 GPU-h; resets 2026-06-01)"
    assert len(warning) <= MAX_WARNING
    assert decide(policy(BudgetAction.REPORT, spent=500.0), request(pinned("a100-80gb"))).warnings == ()


def test_pods_of_an_admitted_job_are_not_refused():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-x",
            "namespace": "nlp",
            "labels": {"allot.dev/tier": "P1"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}],
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }
    req = request(pod, kind=("", "Pod"))
    req["userInfo"] = {"username": "system:serviceaccount:kube-system:job-controller"}
    assert decide(policy(), req).allowed
