"""Talking to an LLM: the client for any OpenAI-compatible server, the embedded llama.cpp server
with its chat handler, and the tool-aware chat template a policy is trained and served in."""
