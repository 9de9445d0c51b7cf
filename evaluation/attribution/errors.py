"""Typed errors of the attribution stage; each message says what to do."""

from sae_workbench.errors import WorkbenchError


class AttributionError(WorkbenchError):
    """Base class of every attribution error."""


class UnsupportedHookError(AttributionError):
    """The SAE hook is not one DePass can read out (resid pre/mid/post, attn_out, mlp_out of a block)."""


class UnsupportedModelError(AttributionError):
    """The model uses a block layout DePass cannot decompose exactly (parallel attention/MLP, extra norms)."""


class UnsupportedSAEError(AttributionError):
    """The SAE's encoder is not a linear read-out DePass can split (reshaped inputs, unknown normalisation)."""


class FeatureOutOfRangeError(AttributionError):
    """The feature index is not in 0..d_sae-1."""


class PositionOutOfRangeError(AttributionError):
    """The target position is not a token position of the text."""


class DecompositionMismatchError(AttributionError):
    """The components no longer sum to the clean state (weights processed differently from the cache)."""
