"""Typed errors of the interactions stage; each message says what to do."""

from sae_workbench.errors import WorkbenchError

INSTALL_HINT = "pip install 'sae-workbench[interactions]'  (from a checkout: pip install '.[interactions]')"


class InteractionsError(WorkbenchError):
    """Base class of every interactions error."""


class MissingExtraError(InteractionsError):
    """shapiq or lightgbm (the `interactions` extra) is not installed."""


class ConstantGameError(InteractionsError):
    """The value function does not vary under masking (e.g. the feature never fires): nothing to explain."""


class PlayerError(InteractionsError):
    """The requested players are unknown or there are none (e.g. no token before the target)."""
