"""Typed errors shared by every stage. Each message says what went wrong and what to do about it."""


class WorkbenchError(Exception):
    """Base class of every error the workbench raises on bad input or state."""


class UnknownModelError(WorkbenchError):
    """The model name is neither the embedded default, a local directory, nor a TransformerLens name."""


class HookNotFoundError(WorkbenchError):
    """A hook name does not exist in the model."""


class ContextSizeError(WorkbenchError):
    """The requested context size exceeds what the model supports."""


class CorpusError(WorkbenchError):
    """A corpus is missing, empty, binary or not UTF-8."""


class CacheMismatchError(WorkbenchError):
    """An activation cache folder was written for a different model, hook, corpus or settings."""


class CacheCorruptError(WorkbenchError):
    """A cache shard failed its integrity check."""
