"""Compile the organisation tree to Slurm accounts, associations and QOS (pure Python).

See ``translate.py`` for the mapping and ``render.py`` / ``parse.py`` for the sacctmgr formats.
"""
