"""The accounting pillar's pages (``views.py``: usage sources, showback, findings, fairness, pools, reviews;
``plans.py``: the what-if panel; ``budgets.py``: the budget form) and its panels on the quota pillar's pages
(``panels.py``). Routed by accounting/urls.py."""
