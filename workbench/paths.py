"""Where the workbench keeps generated artifacts (converted models, the default corpus, runs)."""

import os
from pathlib import Path


def home() -> Path:
    """Root folder for generated artifacts: $WORKBENCH_HOME, else ~/.cache/sae-workbench."""
    root = os.environ.get("WORKBENCH_HOME")
    path = Path(root) if root else Path.home() / ".cache" / "sae-workbench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    """Folder of converted models."""
    path = home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def corpora_dir() -> Path:
    """Folder of assembled corpora."""
    path = home() / "corpora"
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so that a crash leaves either the old file or the complete new one, never a partial file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
