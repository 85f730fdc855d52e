"""The dashboard over the DuckDB store: a Streamlit page (``app.py``) fed by SQL aggregates
(``queries.py``) and the run summary (``store.summary``), drawn with plotly (``figures.py``),
started on loopback by ``synth dashboard`` (``server.py``)."""

from trajsynth.dashboards.server import (
    APP_PATH,
    dashboard_command,
    free_port,
    start_dashboard,
    wait_until_ready,
)

__all__ = [
    "APP_PATH",
    "dashboard_command",
    "free_port",
    "start_dashboard",
    "wait_until_ready",
]
