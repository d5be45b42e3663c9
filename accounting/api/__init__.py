"""The accounting pillar's API resources: usage, showback and fairness, findings, reviews, plans and the
backtest, budgets, pools (``urls.py`` composes them; config/api.py composes every app's)."""
