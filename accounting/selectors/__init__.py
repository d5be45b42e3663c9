"""Reads for accounting, in SQL, one module per subject: usage, showback, fairness, finding windows, and
the read rules (visibility)."""
