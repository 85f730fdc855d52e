"""Prefect flows: one per stage, and `synth run` over rounds. Library code never imports these."""

import os

# offline by default (the machines this runs on may reach no analytics endpoint); a user's
# own setting wins
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

# `Flow.__call__` imports prefect.utilities.visualization (graphviz and its ~20 modules) at a
# flow's first call, while Prefect's own threads are starting. On Python 3.11 an import race
# in importlib (`_ModuleLock`, KeyError of a thread id; fixed in 3.12) hit that import once in
# the slow tier. Imported here, before any flow runs, it is already loaded by then.
import prefect.utilities.visualization  # noqa: E402, F401
