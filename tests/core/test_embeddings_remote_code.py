"""An embedding model with its own code (the paper preset's gte-Qwen2-1.5B-instruct: Qwen2 weights behind an
`auto_map` in its config) loads through our loader only after the `--trust-remote-code` opt-in.

The model here is a tiny randomly initialised Qwen2 built on the spot, whose folder ships its own modelling file as
gte-Qwen2's repository does; everything runs offline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sae_workbench.embeddings import (
    TRUST_REMOTE_CODE_ENV,
    RemoteCodeNotTrustedError,
    embed_texts,
    load_embedding_model,
    needs_remote_code,
    trust_remote_code,
)

MODELLING = '''from transformers import Qwen2Model


class TinyGteModel(Qwen2Model):
    """Stands in for gte-Qwen2's own modelling code; marks that it ran."""

    ran_remote_code = True
'''


@pytest.fixture()
def tiny_gte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with a 2-layer, 32-wide Qwen2, SmolLM2's tokenizer and an auto_map to its own modelling file."""
    from transformers import Qwen2Config, Qwen2Model

    from sae_workbench.models import tiny_tokenizer

    monkeypatch.delenv(TRUST_REMOTE_CODE_ENV, raising=False)
    load_embedding_model.cache_clear()
    tokenizer = tiny_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
    folder = tmp_path / "tiny-gte-qwen2"
    Qwen2Model(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "modeling_tiny_gte.py").write_text(MODELLING)
    saved = json.loads((folder / "config.json").read_text())
    saved["auto_map"] = {"AutoModel": "modeling_tiny_gte.TinyGteModel"}
    (folder / "config.json").write_text(json.dumps(saved))
    yield folder
    load_embedding_model.cache_clear()


def test_a_model_with_its_own_code_loads_only_after_the_opt_in(tiny_gte: Path) -> None:
    assert needs_remote_code(str(tiny_gte)) and needs_remote_code("Alibaba-NLP/gte-Qwen2-1.5B-instruct")
    assert not needs_remote_code("all-MiniLM-L6-v2")
    with pytest.raises(RemoteCodeNotTrustedError, match="--trust-remote-code"):
        embed_texts(["def f():"], model=str(tiny_gte))
    # The paper preset's hub name is refused before any download is tried.
    with pytest.raises(RemoteCodeNotTrustedError, match=r"gte-Qwen2-1\.5B-instruct"):
        load_embedding_model("Alibaba-NLP/gte-Qwen2-1.5B-instruct")
    trust_remote_code()
    model = load_embedding_model(str(tiny_gte))
    assert getattr(
        model[0].auto_model, "ran_remote_code", False
    )  # the folder's own class, not stock Qwen2Model
    vectors = embed_texts(["def f():", "the river bank"], model=str(tiny_gte))
    assert vectors.shape == (2, 32) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


def test_the_cli_flag_is_the_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from sae_workbench import cli

    if not any(c.name == "cache" for c in cli.app.registered_commands):
        cli._register_stage_commands()  # pyright: ignore[reportPrivateUsage]
    app = cli.app
    monkeypatch.delenv(TRUST_REMOTE_CODE_ENV, raising=False)
    import typer

    group = typer.main.get_command(app)
    for command in ("explain", "score"):
        params = group.commands[command].params  # type: ignore[attr-defined]
        assert any("--trust-remote-code" in p.opts for p in params), command
