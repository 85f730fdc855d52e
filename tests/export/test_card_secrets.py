"""The card's run config: budgets shown, secrets masked (by their key's name or their look)."""

from __future__ import annotations

from trajsynth.export.card import _mask, is_secret_key, model_license
from trajsynth.schemas import RunConfig

OPENAI_KEY = "sk-proj-4fJ9xQ2mZr7LwT1bN8vK3pYc6HdG0sAe"
HF_TOKEN = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"


def test_budgets_are_shown_and_secrets_masked() -> None:
    config = RunConfig().model_dump(mode="json")
    config["llm"]["tokens_per_minute"] = 40_000
    config["budgets"]["max_run_tokens"] = 2_000_000
    config.update(
        llm_api_key=OPENAI_KEY,
        hub={"hfToken": HF_TOKEN, "client-secret": "s3cr3t", "password": "hunter2"},
        notes=f"called with Authorization: Bearer {OPENAI_KEY}",
        base_url=f"https://proxy.example/v1?key={OPENAI_KEY}",
    )
    shown = _mask(config)
    assert shown["llm"]["max_tokens"] == 256 and shown["budgets"]["max_tokens"] == 6000
    assert shown["llm"]["tokens_per_minute"] == 40_000
    assert shown["budgets"]["max_run_tokens"] == 2_000_000
    assert shown["tree"]["max_tree_tokens"] == 24_000
    assert shown["llm"]["top_logprobs"] == 5 and shown["llm"]["model"] == "SmolLM2-135M-Instruct"
    assert shown["llm_api_key"] == "***"
    assert shown["hub"] == {"hfToken": "***", "client-secret": "***", "password": "***"}
    text = repr(shown)
    assert OPENAI_KEY not in text and HF_TOKEN not in text
    assert shown["base_url"] == "https://proxy.example/v1?key=***"


def test_secret_key_names() -> None:
    secret = ["api_key", "OPENAI_API_KEY", "hf_token", "accessToken", "secret", "passwd", "key"]
    budget = ["max_tokens", "tokens_per_minute", "max_tree_tokens", "tokenizer", "keyword"]
    assert all(is_secret_key(k) for k in secret)
    assert not any(is_secret_key(k) for k in budget)


def test_model_licenses_known_by_name() -> None:
    assert model_license("SmolLM2-135M-Instruct") == "apache-2.0"
    assert model_license("smollm2") == "apache-2.0"
    assert model_license("gpt-4o") is None and model_license(None) is None
