"""trajsynth: training data for tool-using and coding LLM agents."""

__version__ = "0.1.0"
