"""Endpoint resolution from arguments and environment, and config validation."""

import pytest

from sae_workbench.llm.config import (
    NO_KEY_PLACEHOLDER,
    LLMConfig,
    LLMNotConfiguredError,
    endpoint_status,
    read_api_key,
)


def test_no_model_means_lexical_fallback_notice():
    status = endpoint_status(env={})
    assert not status.configured and status.config is None
    assert (
        "WORKBENCH_LLM_MODEL" in status.notice
        and "lexical" in status.notice
        and "not an LLM" in status.notice
    )
    with pytest.raises(LLMNotConfiguredError, match="WORKBENCH_LLM_MODEL"):
        LLMConfig.from_env(env={})


def test_public_openai_needs_a_key():
    status = endpoint_status(env={"WORKBENCH_LLM_MODEL": "gpt-4o-mini"})
    assert not status.configured and "$OPENAI_API_KEY is not set" in status.notice
    ok = endpoint_status(env={"WORKBENCH_LLM_MODEL": "gpt-4o-mini", "OPENAI_API_KEY": "sk-x"})
    assert ok.configured and ok.config == LLMConfig(model="gpt-4o-mini")
    assert "sk-x" not in ok.notice and "sk-x" not in repr(ok.config)


def test_local_server_needs_no_key_and_env_precedence():
    env = {
        "WORKBENCH_LLM_MODEL": "qwen",
        "OPENAI_BASE_URL": "http://b/v1",
        "WORKBENCH_LLM_BASE_URL": "http://a/v1",
    }
    cfg = LLMConfig.from_env(env=env, concurrency=4)
    assert (cfg.model, cfg.base_url, cfg.concurrency) == ("qwen", "http://a/v1", 4)
    assert read_api_key(cfg, env) == NO_KEY_PLACEHOLDER
    # Arguments beat the environment.
    status = endpoint_status("llama", "http://c/v1", env=env)
    assert status.config is not None and (status.config.model, status.config.base_url) == (
        "llama",
        "http://c/v1",
    )


def test_named_key_variable():
    cfg = LLMConfig(model="m", api_key_env="MY_KEY")
    assert read_api_key(cfg, {"MY_KEY": " k1 ", "OPENAI_API_KEY": "k2"}) == "k1"
    assert read_api_key(cfg, {"OPENAI_API_KEY": "k2"}) is None


def test_params_are_provenance_without_secrets():
    cfg = LLMConfig(model="m", base_url="http://h/v1", temperature=0.7, max_tokens=64)
    assert cfg.params() == {"model": "m", "base_url": "http://h/v1", "temperature": 0.7, "max_tokens": 64}


@pytest.mark.parametrize(
    "field, value",
    [("timeout_s", 0), ("concurrency", 0), ("max_retries", -1), ("max_reasks", -1), ("backoff_max_s", 0.5)],
)
def test_invalid_fields_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        LLMConfig(model="m", **{field: value})
