"""Progress bars on or off for the whole process: what `--no-progress` switches off.

Every command's `--progress/--no-progress` (cli/options.py) passes its value down where a function takes a
`progress` flag; `--no-progress` also calls `silence_bars`, so bars shown where no such flag reaches stay off too:
ours check `bars_enabled()`, transformers' and the Hugging Face hub's ("Loading weights") are switched off through
their own switches, and the environment turns off tqdm in the processes a command starts (demo stages, Ray workers:
tqdm reads TQDM_DISABLE once, at import). The returned function restores everything when the command ends.

    restore = silence_bars()      # --no-progress
    tqdm(..., disable=not bars_enabled())   # shows nothing now
    restore()
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
"""tqdm (>= 4.66) reads TQDM_<param> as the default of <param> at import; the hub and transformers read the second."""

_silenced = 0
"""How many `silence_bars` calls are in effect in this process."""


def bars_enabled() -> bool:
    """False while `silence_bars` is in effect here, or when this process was started with TQDM_DISABLE set."""
    return _silenced == 0 and os.environ.get("TQDM_DISABLE", "").strip().lower() not in {"1", "true", "yes"}


def silence_bars() -> Callable[[], None]:
    """Turn every progress bar in this process (and the processes it starts) off; return the function that restores
    the previous settings."""
    global _silenced
    _silenced += 1
    saved = {name: os.environ.get(name) for name in _ENV}
    os.environ.update(_ENV)
    restores = [_switch_off("transformers.utils.logging"), _switch_off("huggingface_hub.utils")]

    def restore() -> None:
        global _silenced
        _silenced -= 1
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for undo in restores:
            undo()

    return restore


def _switch_off(module_name: str) -> Callable[[], None]:
    """Turn off the bars of a library that keeps its own switch (transformers, huggingface_hub), when it is imported
    (when not, the environment does it at its import); return the function that turns them back on."""
    module: Any = sys.modules.get(module_name)
    if module is None:
        return lambda: None
    if module_name.startswith("transformers"):
        if not module.is_progress_bar_enabled():
            return lambda: None
        module.disable_progress_bar()
        return module.enable_progress_bar
    if module.are_progress_bars_disabled():
        return lambda: None
    module.disable_progress_bars()
    return module.enable_progress_bars
