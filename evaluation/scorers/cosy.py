"""CoSy description score, as PRISM uses it (Kopf et al. 2024 "CoSy"; Kopf et al. NeurIPS 2025 "PRISM",
arXiv 2506.15538; spec: shared/specs/prism.md).

For one description: a generator writes 10 texts that include the described concept; A1 = the feature's
mean-over-tokens activation on each (BOS and padding excluded); A0 = the same on a fixed control set (a held-out
slice of the corpus). AUC = ROC-AUC of concat(A0, A1) with labels 0/1; MAD = (mean A1 − mean A0) / std A0 (0 when
std A0 = 0); plus a one-sided Mann–Whitney U p-value. PRISM (max/mean) aggregates a feature's descriptions; over
features we report mean AUC with a 95% t CI and MAD as mean ± std.

Generators: `LLMGenerator` (re-asks until exactly 10 lines) or, offline, `CorpusRuleGenerator` — it composes texts
from corpus windows matching the description's rules (named "corpus-rule-composer", never presented as an LLM).
Settings (`CosyConfig`): the default asks the LLM for short texts, uses 200 control texts and cuts every text at 128
tokens (quick on a laptop); `CosyConfig.paper()` follows the reference — 512-word texts, 1,000 control texts, texts
cut at 512 tokens. The preset's name and settings are part of every score's key and provenance.
The activation function is injected: `activation_fn(texts) -> (N,) mean activation per text`;
`ModelFeatureMeans(...).for_feature(f)` builds one from a TransformerLens model, a hook and an SAE encoder.
`CosyScorer.load` builds all of it for an indexed SAE (`workbench score --scorer cosy --sae-path`): the model and
the SAE, the control texts and the offline generator's corpus windows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.scorers.base import (
    Detail,
    ScoreBackends,
    ScoreConfig,
    ScoreConfigError,
    ScoreOutcome,
    ScorerDefaults,
    ScorerInputs,
    TestRecords,
)
from sae_workbench.evaluation.scorers.metrics import auroc, mad, mann_whitney_p
from sae_workbench.evaluation.scorers.prompts.cosy import (
    COSY_PAPER_PROMPT_VERSION,
    COSY_PROMPT_VERSION,
    N_TEXTS,
    cosy_messages,
)
from sae_workbench.evaluation.scorers.simulation import UnscorableExplanationError, scorable_explanation
from sae_workbench.examples.rule_language import match_rule_text
from sae_workbench.explainers.prism import cluster_descriptions
from sae_workbench.llm.client import LLMClient, LLMRequest
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store

if TYPE_CHECKING:
    from sae_workbench.corpus import Corpus

COSY_SCORER_VERSION = "cosy-v1"

ActivationFn = Callable[[Sequence[str]], np.ndarray]


class GeneratorError(WorkbenchError):
    """A generator could not produce texts for a description."""


COSY_PRESETS = ("default", "paper")
"""Names `CosyConfig.preset` takes (`workbench score --preset`)."""


@dataclass(frozen=True)
class CosyConfig:
    """CoSy's generator and measurement settings (default: quick; `paper()`: the reference's)."""

    preset: str = "default"
    """Which preset these settings come from ('default' or 'paper'); recorded with every score."""
    words_per_text: int | None = None
    """Length the LLM generator is asked for, in words; None = short texts of one or two sentences."""
    n_control: int = 200
    """Control texts taken from the held-out corpus slice (paper: 1,000 cosmopedia-100k texts)."""
    max_tokens: int = 128
    """Every generated and control text is cut to this many tokens before the model reads it."""

    @classmethod
    def paper(cls) -> CosyConfig:
        """The reference's settings (lkopf/prism src/utils/config.py): 10 texts of MAX_TEXT_LENGTH = 512 words,
        SUBSET_SIZE = 1,000 control texts, every text tokenized with max_length = MAX_TEXT_LENGTH = 512."""
        return cls(preset="paper", words_per_text=512, n_control=1000, max_tokens=512)

    @classmethod
    def named(cls, preset: str) -> CosyConfig:
        """The settings of a preset by name (ScoreConfigError for an unknown one)."""
        if preset == "default":
            return cls()
        if preset == "paper":
            return cls.paper()
        raise ScoreConfigError(f"unknown CoSy preset {preset!r}; choose one of {', '.join(COSY_PRESETS)}")

    @classmethod
    def of_inputs(cls, inputs: ScorerInputs) -> CosyConfig:
        """The settings a run's inputs ask for: the preset's, with `control_size` control texts when given."""
        settings = cls.named(inputs.preset)
        if inputs.control_size is None:
            return settings
        if inputs.control_size < 1:
            raise ScoreConfigError(f"--control-size must be at least 1, not {inputs.control_size}")
        return replace(settings, n_control=inputs.control_size)


@dataclass(frozen=True)
class CosyScore:
    """CoSy metrics of one description."""

    auc: float
    """ROC-AUC of generated (1) vs control (0) text activations; 0.5 = chance, higher is better."""
    mad: float
    """(mean A1 − mean A0) / std A0, 0 when std A0 = 0; higher is better."""
    mannwhitney_p: float
    """One-sided Mann–Whitney U p-value that A1 > A0; lower is stronger evidence."""
    mean_generated: float
    """mean(A1)."""
    mean_control: float
    """mean(A0)."""
    n_generated: int
    """Texts generated."""
    n_control: int
    """Control texts."""

    def to_dict(self) -> dict[str, float | int]:
        """Plain dict for the store's metrics JSON."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def cosy_score(generated: np.ndarray, control: np.ndarray) -> CosyScore:
    """Pure CoSy metrics from the activations A1 (generated) and A0 (control)."""
    a1 = np.asarray(generated, dtype=np.float64).ravel()
    a0 = np.asarray(control, dtype=np.float64).ravel()
    labels = np.r_[np.zeros(a0.size, dtype=bool), np.ones(a1.size, dtype=bool)]
    return CosyScore(
        auc=auroc(np.r_[a0, a1], labels),
        mad=mad(a1, a0),
        mannwhitney_p=mann_whitney_p(a1, a0),
        mean_generated=float(a1.mean()),
        mean_control=float(a0.mean()),
        n_generated=int(a1.size),
        n_control=int(a0.size),
    )


def parse_lines(n: int) -> Callable[[str], list[str]]:
    """A parser accepting exactly `n` non-empty lines (ValueError otherwise, which makes the client re-ask)."""

    def parse(text: str) -> list[str]:
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        if len(lines) != n:
            raise ValueError(f"expected exactly {n} non-empty lines, got {len(lines)}")
        return lines

    return parse


class LLMGenerator:
    """CoSy generator: an LLM writes `n` texts including the concept (PRISM: 10), re-asked until exactly `n`."""

    def __init__(self, client: LLMClient, tag: str = "cosy", settings: CosyConfig | None = None) -> None:
        """Use `client` (its config's max_reasks bounds the re-asks); `settings.words_per_text` picks the prompt."""
        self.client = client
        self.tag = tag
        self.settings = settings or CosyConfig()
        self.name = f"llm:{client.config.model}"
        words = self.settings.words_per_text
        self.prompt_version = COSY_PROMPT_VERSION if words is None else COSY_PAPER_PROMPT_VERSION

    async def generate(self, description: str, n: int = N_TEXTS) -> list[str]:
        """`n` texts, one per line of the answer."""
        messages = cosy_messages(description, n, self.settings.words_per_text)
        parsed = await self.client.complete_parsed(LLMRequest(messages, tag=self.tag), parse_lines(n))
        return parsed.value


@dataclass(frozen=True)
class CorpusSnippet:
    """A corpus window's tokens, for the offline generator."""

    window_id: int
    """Window id."""
    tokens: tuple[str, ...]
    """Token strings (BOS dropped)."""


class CorpusRuleGenerator:
    """Offline CoSy generator: composes texts from corpus windows that match the description's rules.

    Each ';'-separated clause is matched lexically (`examples.rule_language.match_rule_text`: quoted tokens, else
    content words); each text is a span of `span` tokens around one match, taking clauses round-robin and windows
    in a seeded random order. It is a baseline built from the corpus, not an LLM.
    """

    name = "corpus-rule-composer"
    prompt_version = ""

    def __init__(
        self,
        snippets: Sequence[CorpusSnippet],
        seed: int = 0,
        span: int = 24,
        settings: CosyConfig | None = None,
    ) -> None:
        """Search `snippets` (e.g. windows outside the control slice); `span` tokens per composed text (the
        settings' text length applies to LLM generators only; they are recorded with the scores)."""
        self.snippets = list(snippets)
        self.seed = seed
        self.span = span
        self.settings = settings or CosyConfig()

    async def generate(self, description: str, n: int = N_TEXTS) -> list[str]:
        """Up to `n` texts; GeneratorError when no window matches any clause."""
        clauses = [c.strip() for c in description.split(";") if c.strip()]
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(len(self.snippets))
        pools: list[list[str]] = []
        for clause in clauses:
            pool: list[str] = []
            for i in order:
                s = self.snippets[int(i)]
                hits = np.flatnonzero(match_rule_text(clause, s.tokens))
                if hits.size:
                    # End a few tokens after the match: activations depend only on earlier tokens.
                    end = min(len(s.tokens), int(hits[0]) + 4)
                    pool.append("".join(s.tokens[max(0, end - self.span) : end]))
                if len(pool) >= n:
                    break
            pools.append(pool)
        texts: list[str] = []
        while len(texts) < n and any(pools):
            for pool in pools:
                if pool and len(texts) < n:
                    texts.append(pool.pop(0))
        if not texts:
            raise GeneratorError(
                f"no corpus window matches the description {description!r}; the offline generator needs quoted "
                "tokens or content words that occur in the corpus (or configure an LLM generator)"
            )
        return texts


async def score_description(
    generator: LLMGenerator | CorpusRuleGenerator,
    description: str,
    activation_fn: ActivationFn,
    control_activations: np.ndarray,
    n: int = N_TEXTS,
) -> tuple[CosyScore, list[str]]:
    """Generate texts for a description, measure A1 with `activation_fn`, score against the control A0."""
    if not description.strip():
        raise UnscorableExplanationError("the description is empty; nothing to generate texts from")
    texts = await generator.generate(description, n)
    return cosy_score(activation_fn(texts), control_activations), texts


class ModelFeatureMeans:
    """Per-text mean activation of every feature (BOS and padding excluded, unlike PRISM's reference code),
    memoised per text so the control set is encoded once for all features.

    `model` is a HookedTransformer, `encode` maps (N, d_in) hook activations to (N, d_sae) features (an SAE's
    `encode`). Texts are tokenized without special tokens, truncated to `max_tokens` (`CosyConfig.max_tokens`:
    128 by default, the reference's 512 in the paper preset), prefixed with `bos_id`.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        hook: str,
        encode: Callable[[torch.Tensor], torch.Tensor],
        bos_id: int,
        max_tokens: int = 128,
        batch_size: int = 16,
    ) -> None:
        """Bind the model, hook and encoder."""
        self.model = model
        self.hook = hook
        self.encode = encode
        self.bos_id = bos_id
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self._memo: dict[str, np.ndarray] = {}

    def _compute(self, texts: Sequence[str]) -> None:
        """Encode texts not seen yet."""
        from sae_workbench.models import forward_to_hooks

        tokenizer = getattr(self.model, "tokenizer", None)
        assert tokenizer is not None, "the model needs a tokenizer"
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        for b in range(0, len(todo), self.batch_size):
            chunk = todo[b : b + self.batch_size]
            ids = [
                [self.bos_id, *tokenizer.encode(t, add_special_tokens=False)[: self.max_tokens]]
                for t in chunk
            ]
            width = max(len(x) for x in ids)
            tokens_BT = torch.full((len(ids), width), self.bos_id, dtype=torch.long)
            mask_BT = torch.zeros((len(ids), width), dtype=torch.bool)
            for i, x in enumerate(ids):
                tokens_BT[i, : len(x)] = torch.tensor(x)
                mask_BT[i, 1 : len(x)] = True  # exclude BOS (position 0) and right padding
            with torch.no_grad():
                acts_BTD = forward_to_hooks(self.model, tokens_BT, [self.hook])[self.hook]  # type: ignore[arg-type]
                feats_BTF = self.encode(acts_BTD.reshape(-1, acts_BTD.shape[-1])).reshape(*mask_BT.shape, -1)
            feats_BTF = feats_BTF.float() * mask_BT[..., None]
            means_BF = feats_BTF.sum(dim=1) / mask_BT.sum(dim=1, keepdim=True).clamp(min=1)
            for t, row in zip(chunk, means_BF.cpu().numpy(), strict=True):
                self._memo[t] = row

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(N, d_sae) mean activations."""
        self._compute(texts)
        return np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, 0))

    def for_feature(self, feature: int) -> ActivationFn:
        """The (N,) activation function of one feature."""
        return lambda texts: self(texts)[:, feature] if len(texts) else np.zeros(0)


@dataclass(frozen=True)
class CosyData:
    """What CoSy measures with for one indexed SAE: the model + SAE per-text means, control texts and corpus windows."""

    activation_fn_for: Callable[[int], ActivationFn]
    """feature → (N,) mean activation per text (model + SAE forward)."""
    control_texts: list[str]
    """The held-out slice: the windows right after the indexed ones."""
    snippets: list[CorpusSnippet]
    """Indexed windows (at most 5,000) the offline generator composes texts from."""


class CosyControlError(ScoreConfigError):
    """No control text could be read (the corpus ends where the indexed windows end)."""


def read_control_texts(corpus: Corpus, tokenizer: Any, after_tokens: int, settings: CosyConfig) -> list[str]:
    """Up to `settings.n_control` control texts of `settings.max_tokens` tokens each (BOS + max_tokens - 1 text
    tokens, the cut every generated text gets: 512 in the paper preset), cut from the corpus after its first
    `after_tokens` text tokens (the indexed windows'); CosyControlError when none is left."""
    from sae_workbench.corpus import iter_windows

    per_window = settings.max_tokens - 1
    start = -(-after_tokens // per_window)  # the first whole window after the indexed text
    control: list[str] = []
    for batch in iter_windows(corpus, tokenizer, settings.max_tokens, start_window=start, batch_size=64):
        control.extend(batch.texts)
        if len(control) >= settings.n_control:
            break
    if not control:
        raise CosyControlError(
            f"no CoSy control text: {corpus.name} has no {settings.max_tokens}-token window after the "
            f"{after_tokens} indexed tokens; index fewer windows or use a longer corpus"
        )
    return control[: settings.n_control]


def load_cosy_data(
    store: Store,
    sae_id: str,
    sae_path: Path,
    settings: CosyConfig,
    step: Callable[[str], None] | None = None,
) -> CosyData:
    """Load the model and the SAE at `sae_path` (which must be SAE `sae_id`), the control texts and the generator's
    windows of an indexed SAE; `step` announces each step."""
    say = step or (lambda _text: None)
    from sae_workbench.corpus import default_bos_id, resolve_corpus
    from sae_workbench.models import load_model
    from sae_workbench.sae.io import compute_sae_id, load_sae
    from sae_workbench.store import NotIndexedError

    record = store.get_sae(sae_id)
    progress = store.index_progress(sae_id)
    if progress is None:
        raise NotIndexedError(
            f"SAE {sae_id} has no activations in {store.path}; run `workbench index` first."
        )
    say(f"loading model {record.model} (cosy)")
    model = load_model(record.model)
    say(f"loading SAE {sae_path}")
    sae = load_sae(str(sae_path))
    if compute_sae_id(sae, record.model, record.hook) != sae_id:
        raise ScoreConfigError(
            f"{sae_path} is not SAE {sae_id} (its weights hash differently); pass the SAE you indexed"
        )
    bos_id = default_bos_id(model.tokenizer)
    means = ModelFeatureMeans(model, record.hook, sae.encode, bos_id, max_tokens=settings.max_tokens)
    # Control = a fixed held-out slice: the text right after the indexed windows (never explained or scored).
    corpus = resolve_corpus(progress.corpus)
    say(f"reading {settings.n_control} control texts from {progress.corpus} (windows after the indexed ones)")
    indexed_tokens = progress.next_window * (progress.context_size - 1)
    control = read_control_texts(corpus, model.tokenizer, indexed_tokens, settings)
    ids = store.indexed_window_ids(sae_id)[:5000]
    snippets = [
        CorpusSnippet(w.window_id, tuple(w.token_strings[1:]))
        for w in store.get_windows(progress.corpus, ids)
    ]
    return CosyData(means.for_feature, control, snippets)


class CosyScorer(ScorerDefaults):
    """CoSy AUC/MAD of each description against control texts (PRISM explanations: one per cluster; the feature's
    score is the best description's, as PRISM's "max", with the mean over descriptions beside it)."""

    name: ClassVar[str] = "cosy"
    version: ClassVar[str] = COSY_SCORER_VERSION
    headline: ClassVar[str] = "auc"
    uses_test_set: ClassVar[bool] = False
    uses_negatives: ClassVar[bool] = False
    local_only: ClassVar[str] = "runs the model and the SAE in this process"

    def __init__(
        self,
        generator: LLMGenerator | CorpusRuleGenerator | None,
        activation_fn_for: Callable[[int], ActivationFn] | None,
        control_texts: Sequence[str],
        settings: CosyConfig | None = None,
    ) -> None:
        """Generate with `generator`; measure with the model + SAE behind `activation_fn_for` (all three are needed
        to score a live feature; dead ones are recorded without them). `settings` (default: the generator's) are
        recorded: the preset, the text length asked for and the token cut."""
        self.generator = generator
        self.activation_fn_for = activation_fn_for
        self.control_texts = list(control_texts)
        self.settings = settings or getattr(generator, "settings", None) or CosyConfig()

    @classmethod
    def check_inputs(cls, inputs: ScorerInputs) -> None:
        """A known preset, a positive control size, and the SAE's weights to run."""
        CosyConfig.of_inputs(inputs)
        if inputs.sae_path is None:
            raise ScoreConfigError(
                "--scorer cosy runs the model and the SAE on generated texts: pass --sae-path"
            )

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> CosyScorer:
        """The backends' generator, activation function and control texts when handed (tests), else loaded from the
        run's inputs when they name an SAE (`load`); without either, dead features are still recorded."""
        inputs = backends.inputs
        if backends.activation_fn_for is None and inputs.store is not None and inputs.sae_path is not None:
            return cls.load(inputs.store, inputs.sae_id, inputs.sae_path, CosyConfig.of_inputs(inputs),
                            client=backends.llm_client, seed=config.seed, step=inputs.step)  # fmt: skip
        return cls(backends.generator, backends.activation_fn_for, backends.control_texts)

    @classmethod
    def load(
        cls,
        store: Store,
        sae_id: str,
        sae_path: Path,
        settings: CosyConfig,
        *,
        client: LLMClient | None = None,
        seed: int = 0,
        step: Callable[[str], None] | None = None,
    ) -> CosyScorer:
        """CoSy for an indexed SAE: the model + SAE means, the held-out control texts, and an LLM generator on
        `client` (offline: the corpus-rule composer over the indexed windows, drawn with `seed`)."""
        data = load_cosy_data(store, sae_id, sae_path, settings, step)
        generator = (
            LLMGenerator(client, settings=settings)
            if client is not None
            else CorpusRuleGenerator(data.snippets, seed=seed, settings=settings)
        )
        return cls(generator, data.activation_fn_for, data.control_texts)

    def backend(self) -> str:
        """The generator's name (the offline corpus-rule composer when none is given)."""
        return str(self.generator.name) if self.generator is not None else CorpusRuleGenerator.name

    def prompt_version(self) -> str:
        """The generator's prompt version ('' for the offline corpus-rule composer)."""
        return str(getattr(self.generator, "prompt_version", ""))

    def key_params(self) -> dict[str, Any]:
        """The control set's size and the CoSy settings (preset, words per text, token cut)."""
        settings = {k: v for k, v in asdict(self.settings).items() if k != "n_control"}
        return {"n_control": len(self.control_texts), "cosy": settings}

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """CoSy metrics of each description (a generator that finds nothing is a recorded failure)."""
        if self.activation_fn_for is None or not self.control_texts or self.generator is None:
            raise ScoreConfigError(
                "cosy needs a generator, an activation function (model + SAE) and control texts; "
                "`workbench score --scorer cosy` builds them from --sae-path"
            )
        text = scorable_explanation(explanation.text, explanation.rules).text
        fn = self.activation_fn_for(explanation.feature)
        control = fn(self.control_texts)
        descriptions = cluster_descriptions(explanation.extra) or [text]
        per: list[dict[str, Any]] = []
        try:
            for d in descriptions:
                s, texts = await score_description(self.generator, d, fn, control)
                per.append({"description": d, **s.to_dict(), "texts": texts})
        except GeneratorError as err:
            return ScoreOutcome.failed(Status.GENERATOR_FAILED, error=str(err))
        aucs = [p["auc"] for p in per]
        mads = [p["mad"] for p in per]
        metrics = {
            "auc": float(np.nanmax(aucs)),
            "mad": float(np.nanmax(mads)),
            "auc_mean": float(np.nanmean(aucs)),
            "mad_mean": float(np.nanmean(mads)),
            "mannwhitney_p": float(np.nanmin([p["mannwhitney_p"] for p in per])),
            "n_descriptions": len(per),
        }
        details: dict[str, Detail] = {"descriptions": per}
        return ScoreOutcome(Status.OK, metrics, self.headline, details)
