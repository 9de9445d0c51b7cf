"""The tree-based iterative explainer (Ma, Pfrommer, Sojoudi, "Revising and Falsifying Sparse Autoencoder Feature
Explanations", NeurIPS 2025; search adapted from tree-of-attacks).

Roots are sampled structured explanations; every node is scored on the train split AND on its own valid split (the
reference code reuses train for valid — a bug we do not copy); each node gets feedback ("Overall score: X.XX" plus
the train record whose removal would raise the pooled correlation most, token by token); each node gets `branching`
children; children are pruned to the top `width` by train score; the search stops early when the best train score
reaches `stop_score`; the result is the node with the best VALIDATION score over the whole tree, which is kept.

The proposer is an LLM (`LLMProposer`) or, offline, `LexicalEditor`, a rule editor that adds, removes, narrows or
re-weights rules from the worst record — so the search itself runs and is tested without an LLM. The LLM proposer's
revisions continue their branch's conversation, as the reference does: every train record, then each earlier
explanation of the branch with its answer and feedback (`explainers.prompts.tree`).

`TreeConfig()` holds the spec's settings; `TreeConfig.paper()` (`--preset paper`) the reference's paper runs: depth 2,
width 2, roots at temperature 1.0 after 5 few-shot examples, train without negatives, train/valid scored on the 0..5
values, the stop rule checked only after a level's pruning (docs/deviations-tree.md).

Files: `presets.py` (the search settings and their presets), `splits.py` (train / valid / test records),
`search.py` (the search itself and the `Proposer` protocol), `lexical_editor.py` (the offline proposer),
`llm_proposer.py` (the LLM proposer), `explainer.py` (`TreeExplainer`, the explain job's adapter).
"""

from sae_workbench.explainers.tree.explainer import TREE_VERSION, TreeExplainer, TreeInputs
from sae_workbench.explainers.tree.lexical_editor import LexicalEditor
from sae_workbench.explainers.tree.llm_proposer import LLMProposer
from sae_workbench.explainers.tree.presets import TREE_PRESETS, TreeConfig, TreePresetError, tree_preset
from sae_workbench.explainers.tree.search import Proposer, TreeNode, TreeResult, tree_search
from sae_workbench.explainers.tree.splits import Split, TreeSplits

__all__ = [
    "TREE_PRESETS",
    "TREE_VERSION",
    "LLMProposer",
    "LexicalEditor",
    "Proposer",
    "Split",
    "TreeConfig",
    "TreeExplainer",
    "TreeInputs",
    "TreeNode",
    "TreePresetError",
    "TreeResult",
    "TreeSplits",
    "tree_preset",
    "tree_search",
]
