"""Strict scripted fakes shared by the tests: the LLM (``fakes.llm``), the sandbox
(``fakes.sandbox``), an in-process environment and trajectory builders."""
