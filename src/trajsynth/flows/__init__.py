"""Prefect flows: one per stage, and `synth run` over rounds. Library code never imports these."""
