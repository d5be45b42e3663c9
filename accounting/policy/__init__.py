"""Pure policy core of the accounting app (no Django; filled in by its issue)."""
