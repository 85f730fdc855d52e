"""The `synth` command (top floor, beside flows/ and dashboards/): nothing below imports it."""
