"""`python -m trajsynth.cli` runs the `synth` command."""

from trajsynth.cli.main import main

main()
