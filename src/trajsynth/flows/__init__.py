"""Prefect flows: one per stage, and `synth run` over rounds. Library code never imports these."""

import os

# offline by default (the machines this runs on may reach no analytics endpoint); a user's
# own setting wins
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
