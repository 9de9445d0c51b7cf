"""Why a feature fires and what it does: DePass attribution (arXiv 2510.18462), position-aware LRP (arXiv
2506.02138), baselines, ablation and steering.

from sae_workbench.evaluation.attribution import depass_tokens, depass_components, lrp_attribution, ablate_feature
"""

from sae_workbench.evaluation.attribution.baselines import (
    TokenScores,
    attention_rollout,
    from_depass,
    grad_x_input,
    integrated_gradients,
    random_scores,
)
from sae_workbench.evaluation.attribution.depass import (
    ComponentAttribution,
    TokenAttribution,
    UpstreamAttribution,
    depass_components,
    depass_tokens,
    depass_upstream,
)
from sae_workbench.evaluation.attribution.effects import (
    AblationEffect,
    SteeringEffect,
    SteeringResult,
    ablate_feature,
    steer_feature,
)
from sae_workbench.evaluation.attribution.errors import (
    AttributionError,
    DecompositionMismatchError,
    FeatureOutOfRangeError,
    PositionOutOfRangeError,
    UnsupportedHookError,
    UnsupportedModelError,
    UnsupportedSAEError,
)
from sae_workbench.evaluation.attribution.lrp_rules import LRP_MODES, LrpMode
from sae_workbench.evaluation.attribution.pa_lrp import LrpAttribution, lrp_attribution
from sae_workbench.evaluation.attribution.propagate import MLP_RULES, SOFTMAX_TEMPERATURE, MlpRule

__all__ = [
    "LRP_MODES",
    "MLP_RULES",
    "SOFTMAX_TEMPERATURE",
    "AblationEffect",
    "AttributionError",
    "ComponentAttribution",
    "DecompositionMismatchError",
    "FeatureOutOfRangeError",
    "LrpAttribution",
    "LrpMode",
    "MlpRule",
    "PositionOutOfRangeError",
    "SteeringEffect",
    "SteeringResult",
    "TokenAttribution",
    "TokenScores",
    "UnsupportedHookError",
    "UnsupportedModelError",
    "UnsupportedSAEError",
    "UpstreamAttribution",
    "ablate_feature",
    "attention_rollout",
    "depass_components",
    "depass_tokens",
    "depass_upstream",
    "from_depass",
    "grad_x_input",
    "integrated_gradients",
    "lrp_attribution",
    "random_scores",
    "steer_feature",
]
