"""The GRPO stage (docs/design.md §12, docs/methods.md §9-§11, §13).

Modules: ``advantages`` (every estimator of §13, numpy), ``early_stop`` (ESPO, §11),
``tool_env`` (a task's live environment as TRL's ``environment_factory`` wants it),
``rewards`` (the verifier as TRL's reward), ``tasks`` (RL rows), ``trainer`` (the
GRPOTrainer subclass, pinned to TRL 1.16.0), ``run`` (``train(config)``) and
``chat_template`` (the tool-aware template shared with the SFT export); for the loop that
trains a policy on the data and measures it: ``sft`` (TRL SFTTrainer), ``models_io``
(loading the embedded GGUF or a HF folder for training), ``serve`` (a tuned model written
as a GGUF), ``passk`` (pass@k and 95% intervals), ``splits`` (held-out splits and the
leakage check), ``eval`` (summaries) and ``records`` (``models``/``evals`` rows). Nothing here
imports torch, transformers or TRL at module import time.
"""
