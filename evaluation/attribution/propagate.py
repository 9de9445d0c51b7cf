"""The decomposed forward pass of DePass (arXiv 2510.18462) on a TransformerLens HookedTransformer.

A decomposed state ``C_MND`` holds M additive components of the residual stream (N tokens, D = d_model); their sum
is the clean state at every layer. Attention patterns, norm scales and MLP activations come from one clean forward
(`trace_model`) and stay frozen; each sublayer's output is split among the components and added to them.

States are numbered along the residual stream: ``2ℓ`` is ``blocks.ℓ.hook_resid_pre``, ``2ℓ + 1`` is
``blocks.ℓ.hook_resid_mid`` and ``2ℓ + 2`` is ``blocks.ℓ.hook_resid_post``. The step from an even state is block ℓ's
attention, from an odd one its MLP.

Biases (LayerNorm b, b_V, b_O, b_in, b_out) all go to one dedicated bias component, so completeness is exact for any
model; the reference code drops the v/o biases (spec A.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from transformer_lens import HookedTransformer

from sae_workbench.evaluation.attribution.errors import DecompositionMismatchError, UnsupportedModelError

MlpRule = Literal["softmax", "up_linear", "gate_linear"]
MLP_RULES: tuple[MlpRule, ...] = ("softmax", "up_linear", "gate_linear")
# The paper's default temperature of the softmax rule (arXiv 2510.18462; reference code mlp_softmax_temp = 0.1).
SOFTMAX_TEMPERATURE = 0.1
# Below this |gate share| the residual component counts as empty in the softmax rule (reference code, spec A.2).
REST_ZERO_TOL = 1e-5
# Below this |g| the secant slope act(g)/g of `gate_linear` is replaced by act'(0).
SECANT_TOL = 1e-6
# A production invariant (spec D.): components must still sum to the clean state; looser than the test's 1e-5.
MISMATCH_TOL = 1e-3
# Below this fraction of non-zero rows a projection runs on those rows alone (gather + scatter beats the dense mm).
NONZERO_ROWS_DENSE = 0.75
ALL = slice(None)


@dataclass(frozen=True)
class Roles:
    """Which component indices play special parts in the propagation."""

    bias: int
    """Receives every bias of every sublayer."""
    rest: int
    """The 'left/residual' component: takes a gate share nobody else has (softmax rule)."""
    bos: int | None = None
    """Token-level only: the BOS component, excluded from gate shares after position 0 (ignore_special_token)."""


@dataclass(frozen=True)
class Trace:
    """Clean tensors of one forward pass of one text (batch 1), as a dict of TransformerLens hook name -> tensor."""

    acts: dict[str, torch.Tensor]
    n_states: int
    """Number of residual states traced (2·blocks + 1)."""

    def state(self, index: int) -> torch.Tensor:
        """The clean residual state number `index`, shape (N, D)."""
        layer, mid = divmod(index, 2)
        if mid:
            return self.acts[f"blocks.{layer}.hook_resid_mid"]
        if f"blocks.{layer}.hook_resid_pre" in self.acts:
            return self.acts[f"blocks.{layer}.hook_resid_pre"]
        return self.acts[f"blocks.{layer - 1}.hook_resid_post"]


_BLOCK_HOOKS = (
    "hook_resid_pre",
    "hook_resid_mid",
    "hook_resid_post",
    "hook_attn_out",
    "hook_mlp_out",
    "attn.hook_pattern",
    "attn.hook_z",
    "mlp.hook_pre",
    "mlp.hook_pre_linear",
    "mlp.hook_post",
)


def check_model(model: HookedTransformer) -> None:
    """Raise UnsupportedModelError for block layouts DePass cannot decompose exactly."""
    cfg = model.cfg
    problems = []
    if cfg.parallel_attn_mlp:
        problems.append("parallel attention and MLP (no resid_mid)")
    if getattr(cfg, "use_normalization_before_and_after", False):
        problems.append("norms after the sublayers (Gemma-2 style)")
    if cfg.act_fn is not None and cfg.act_fn.endswith("_ln"):
        problems.append(f"a LayerNorm inside the MLP (act_fn {cfg.act_fn})")
    if cfg.num_experts:
        problems.append("mixture-of-experts MLPs")
    if cfg.normalization_type not in (None, "LN", "LNPre", "RMS", "RMSPre"):
        problems.append(f"normalization_type {cfg.normalization_type}")
    if problems:
        raise UnsupportedModelError(
            f"DePass cannot decompose {cfg.model_name!r}: {', '.join(problems)}. Use a sequential pre-norm "
            "model (GPT-2, Llama, SmolLM2, Qwen2, Pythia without parallel blocks)."
        )


@torch.no_grad()
def trace_model(model: HookedTransformer, tokens_N: torch.Tensor, last_block: int) -> Trace:
    """One clean forward through block `last_block`, caching what the decomposition needs."""
    check_model(model)
    wanted = {f"blocks.{ell}.{h}" for ell in range(last_block + 1) for h in _BLOCK_HOOKS}
    for ell in range(last_block + 1):
        for norm in ("ln1", "ln2"):
            wanted.add(f"blocks.{ell}.{norm}.hook_scale")
    stop = last_block + 1 if last_block + 1 < model.cfg.n_layers else None
    _, cache = model.run_with_cache(
        tokens_N[None], names_filter=lambda name: name in wanted, stop_at_layer=stop, return_type=None
    )
    acts = {name: t[0].float() for name, t in cache.items()}
    return Trace(acts=acts, n_states=2 * (last_block + 1) + 1)


def param(module: torch.nn.Module, name: str) -> torch.Tensor:
    """A module's weight or bias `name` as a detached float32 tensor."""
    value = getattr(module, name)
    if not isinstance(value, torch.Tensor):
        raise UnsupportedModelError(
            f"{type(module).__name__}.{name} is not a tensor; the block layout is not TransformerLens's."
        )
    return value.detach().float()


def _norm(
    model: HookedTransformer,
    ln: torch.nn.Module,
    C_MND: torch.Tensor,
    x_ND: torch.Tensor,
    roles: Roles,
    hooked_scale: torch.Tensor | None,
) -> torch.Tensor:
    """Apply a pre-sublayer norm to every component with the scale frozen at the clean state `x_ND`."""
    kind = model.cfg.normalization_type
    if kind is None:
        return C_MND
    eps = model.cfg.eps
    if kind.startswith("LN"):
        x_ND = x_ND - x_ND.mean(-1, keepdim=True)
        C_MND = C_MND - C_MND.mean(-1, keepdim=True)  # centring is linear, so it applies per component
    scale_N1 = (x_ND.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    # One TL norm variant skips hook_scale, so the scale is recomputed and checked against it where present.
    if hooked_scale is not None and not torch.allclose(
        hooked_scale.reshape(scale_N1.shape), scale_N1, rtol=1e-4
    ):
        raise DecompositionMismatchError(
            "the norm scale recomputed from the cached residual differs from hook_scale: the model's norm is not "
            "the TransformerLens LN/RMS it claims; use a model loaded by sae_workbench.models.load_model."
        )
    factor_ND = 1.0 / scale_N1
    if kind in ("LN", "RMS"):
        factor_ND = factor_ND * param(ln, "w")
    out = C_MND * factor_ND  # one pass over the components
    if kind == "LN":
        out[roles.bias] += param(ln, "b")
    return out


def _mm_nonzero(
    X_RK: torch.Tensor, W_KO: torch.Tensor, live_R: torch.Tensor | None = None, fill: float = 0.0
) -> torch.Tensor:
    """X @ W computed on the rows `live_R` only (default: X's non-zero rows), the other rows set to `fill`.

    The other rows of X must be zero. A token split is zero before each token, so about half the rows of a
    token-level run are skipped.
    """
    nz_R = X_RK.ne(0).any(-1) if live_R is None else live_R
    n = int(nz_R.sum())
    if n > NONZERO_ROWS_DENSE * X_RK.shape[0]:
        out_RO = X_RK @ W_KO
        if fill != 0.0:
            out_RO[~nz_R] = fill
        return out_RO
    out_RO = X_RK.new_full((X_RK.shape[0], W_KO.shape[1]), fill)
    if n:
        out_RO[nz_R] = X_RK[nz_R] @ W_KO
    return out_RO


def attention_step(
    model: HookedTransformer,
    trace: Trace,
    layer: int,
    C_MND: torch.Tensor,
    roles: Roles,
    rows: slice = ALL,
    live_MN: torch.Tensor | None = None,
) -> torch.Tensor:
    """Block `layer`'s attention output at query positions `rows`, split among the components (M, n_rows, D).

    `C_MND` is the whole decomposed resid_pre (every key position); patterns are frozen from the clean pass.
    `live_MN` marks the (component, position) rows that may be non-zero (`live_rows`); None: found from the data.
    """
    block = model.blocks[layer]
    attn = block.attn
    x_ND = trace.acts[f"blocks.{layer}.hook_resid_pre"]
    Chat_MND = _norm(model, block.ln1, C_MND, x_ND, roles, trace.acts.get(f"blocks.{layer}.ln1.hook_scale"))
    M, N, D = Chat_MND.shape
    # GQA keeps n_key_value_heads value projections (TL grouped_query_attention: _W_V); repeat after projecting.
    W_V_GDE = param(attn, "_W_V" if hasattr(attn, "_W_V") else "W_V")
    b_V_GE = param(attn, "_b_V" if hasattr(attn, "_b_V") else "b_V")
    G, _, E = W_V_GDE.shape
    H = model.cfg.n_heads
    live_R = None if live_MN is None else live_MN.reshape(-1)
    V_MNGE = _mm_nonzero(Chat_MND.reshape(M * N, D), W_V_GDE.permute(1, 0, 2).reshape(D, G * E), live_R)
    V_MNGE = V_MNGE.reshape(M, N, G, E)
    V_MNGE[roles.bias] += b_V_GE
    # Heads of one KV group share V: (G, N, M·E) per group, then each query head h reads group h // (H / G).
    V_GKX = V_MNGE.permute(2, 1, 0, 3).reshape(G, N, M * E)
    A_HQK = trace.acts[f"blocks.{layer}.attn.hook_pattern"][:, rows]
    Q = A_HQK.shape[1]
    z_HQX = torch.bmm(A_HQK, V_GKX.repeat_interleave(H // G, dim=0))  # rows of A sum to 1: b_V counted once
    z_MQHE = z_HQX.reshape(H, Q, M, E).permute(2, 1, 0, 3)
    W_O = param(attn, "W_O").reshape(H * E, D)
    live_out_R = None if live_MN is None else attention_live(live_MN)[:, rows].reshape(-1)
    out_MQD = _mm_nonzero(z_MQHE.reshape(M * Q, H * E), W_O, live_out_R).reshape(M, Q, D)
    out_MQD[roles.bias] += param(attn, "b_O")
    return out_MQD


def _softmax_split(
    g_MNJ: torch.Tensor,
    core_NJ: torch.Tensor,
    roles: Roles,
    temperature: float,
    first_position: int = 0,
    zeros_marked: bool = False,
) -> torch.Tensor:
    """The paper's softmax split of each frozen neuron activation `core_NJ` by gate share g (M, N, J).

    A component whose share is exactly zero (e.g. a token after n in a token split) takes no part; the weights of
    the others, softmax_m(g / T), sum to 1, so the shares sum to `core_NJ`. With `zeros_marked` the caller has
    already written -inf into the all-zero rows (a zero entry inside a non-zero row happens only by coincidence),
    which saves a pass over the tensor. Works in place on `g_MNJ`; `first_position` is the absolute position of
    its first column (the BOS rule applies after absolute position 0).
    """
    rest_NJ = g_MNJ[roles.rest]
    # The residual component's share counts as empty below the reference code's 1e-5.
    rest_NJ.masked_fill_(rest_NJ.abs() < REST_ZERO_TOL, float("-inf"))
    if not zeros_marked:
        g_MNJ.masked_fill_(g_MNJ.eq(0), float("-inf"))
    if roles.bos is not None:
        # ignore_special_token: the BOS attention sink takes no share after position 0 (reference default True).
        g_MNJ[roles.bos, max(0, 1 - first_position) :] = float("-inf")
    g_MNJ.div_(temperature)
    top_NJ = g_MNJ.amax(0)
    # Nobody holds a share: the residual component takes it (logit 0 against -inf everywhere else).
    nobody_NJ = top_NJ.isneginf()
    if bool(nobody_NJ.any()):
        rest_NJ.masked_fill_(nobody_NJ, 0.0)
        top_NJ.masked_fill_(nobody_NJ, 0.0)
    # softmax over m written out, in place: exp(l - max) * (core / sum) (torch.softmax over the outer dim is slow).
    g_MNJ.sub_(top_NJ).exp_()
    return g_MNJ.mul_(core_NJ / g_MNJ.sum(0))


def _act_slope_at_zero(act_fn: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """act'(0) by a central difference (SiLU and GELU: 0.5)."""
    h = torch.tensor([-1e-3, 1e-3])
    y = act_fn(h)
    return float((y[1] - y[0]) / 2e-3)


def mlp_step(
    model: HookedTransformer,
    trace: Trace,
    layer: int,
    C_MND: torch.Tensor,
    roles: Roles,
    rule: MlpRule,
    temperature: float = SOFTMAX_TEMPERATURE,
    rows: slice = ALL,
    live_MN: torch.Tensor | None = None,
) -> torch.Tensor:
    """Block `layer`'s MLP output split among the components by `rule`, shape (M, n_rows, D); frozen activations.

    `C_MND` holds the decomposed resid_mid at positions `rows` (the MLP is position-wise); `live_MN` as in
    `attention_step`, for those positions.
    Gated (TL gated_mlp: h = act(g)·u + b_in): `softmax` splits the frozen act(g)·u by gate share g_m (paper);
    `up_linear` freezes act(g) and splits u linearly; `gate_linear` freezes the secant slope act(g)/g and u and
    splits g linearly (reference `taylor`). Ungated (h = act(g), g = x W_in + b_in): `up_linear` and `gate_linear`
    are the same secant rule. All three give per-neuron shares summing to the clean activation.
    """
    block = model.blocks[layer]
    mlp = block.mlp
    gated = model.cfg.gated_mlp
    x_ND = trace.acts[f"blocks.{layer}.hook_resid_mid"][rows]
    scale = trace.acts.get(f"blocks.{layer}.ln2.hook_scale")
    Chat_MND = _norm(model, block.ln2, C_MND, x_ND, roles, None if scale is None else scale[rows])
    M, N, D = Chat_MND.shape
    g_NJ = trace.acts[f"blocks.{layer}.mlp.hook_pre"][rows]
    h_NJ = trace.acts[f"blocks.{layer}.mlp.hook_post"][rows]
    b_in = param(mlp, "b_in")
    W_first = param(mlp, "W_gate" if gated else "W_in")
    J = W_first.shape[1]
    flat = Chat_MND.reshape(M * N, D)
    live_R = None if live_MN is None else live_MN.reshape(-1)
    if gated:
        u_NJ = trace.acts[f"blocks.{layer}.mlp.hook_pre_linear"][rows]
        core_NJ = h_NJ - b_in  # TL adds b_in after the product; it goes to the bias component
    else:
        u_NJ = torch.ones_like(g_NJ)
        core_NJ = h_NJ
    if rule == "up_linear" and gated:
        u_MNJ = _mm_nonzero(flat, param(mlp, "W_in"), live_R).reshape(M, N, J)
        hm_MNJ = u_MNJ.mul_(mlp.act_fn(g_NJ))
    else:
        if rule == "softmax":
            # Gate shares only for the non-zero rows; the zero ones take no part (-inf), except the residual and,
            # for an ungated MLP, the bias component (it holds b_in).
            nonzero_MN = Chat_MND.ne(0).any(-1)
            nonzero_MN[roles.rest] = True
            if not gated:
                nonzero_MN[roles.bias] = True
            live_R = nonzero_MN.reshape(-1)
            g_MNJ = _mm_nonzero(flat, W_first, live_R, float("-inf")).reshape(M, N, J)
        else:
            g_MNJ = _mm_nonzero(flat, W_first, live_R).reshape(M, N, J)
        if not gated:
            g_MNJ[roles.bias] += b_in
            if rule == "softmax":  # a zero share takes no part (paper rule), b_in = 0 included
                g_MNJ[roles.bias].masked_fill_(g_MNJ[roles.bias].eq(0), float("-inf"))
        if rule == "softmax":
            hm_MNJ = _softmax_split(g_MNJ, core_NJ, roles, temperature, rows.start or 0, zeros_marked=True)
        elif rule in ("gate_linear", "up_linear"):
            small = g_NJ.abs() <= SECANT_TOL
            safe_g = torch.where(small, torch.ones_like(g_NJ), g_NJ)
            slope_NJ = torch.where(small, _act_slope_at_zero(mlp.act_fn) * u_NJ, core_NJ / safe_g)
            hm_MNJ = g_MNJ.mul_(slope_NJ)
        else:
            raise ValueError(f"unknown MLP rule {rule!r}; use one of {MLP_RULES}")
    W_out = param(mlp, "W_out")
    out_MND = _mm_nonzero(hm_MNJ.reshape(M * N, J), W_out, live_R).reshape(M, N, D)
    bias_D = param(mlp, "b_out")
    if gated:
        bias_D = bias_D + b_in @ W_out
    out_MND[roles.bias] += bias_D
    return out_MND


def step(
    model: HookedTransformer,
    trace: Trace,
    state: int,
    C_MND: torch.Tensor,
    roles: Roles,
    rule: MlpRule,
    temperature: float = SOFTMAX_TEMPERATURE,
    rows: slice = ALL,
    live_MN: torch.Tensor | None = None,
) -> torch.Tensor:
    """The sublayer output (M, n_rows, D) at positions `rows` that takes residual state `state` to `state + 1`.

    An attention step reads the whole decomposed state; an MLP step reads the state at `rows` only.
    """
    layer, mid = divmod(state, 2)
    if mid:
        return mlp_step(model, trace, layer, C_MND, roles, rule, temperature, rows, live_MN)
    return attention_step(model, trace, layer, C_MND, roles, rows, live_MN)


def live_rows(C_MND: torch.Tensor, roles: Roles) -> torch.Tensor:
    """(M, N) bool: the rows of a decomposition that may be non-zero; the bias and residual ones always may."""
    live_MN = C_MND.ne(0).any(-1)
    live_MN[roles.bias] = True
    live_MN[roles.rest] = True
    return live_MN


def attention_live(live_MN: torch.Tensor) -> torch.Tensor:
    """The live rows after a causal attention: a component reaches every position from its first live one on.

    (Frozen softmax patterns are positive on every earlier position; the bias and residual rows stay live.)
    """
    return live_MN.int().cummax(dim=1).values.bool()


def propagate(
    model: HookedTransformer,
    trace: Trace,
    C_MND: torch.Tensor,
    start: int,
    end: int,
    roles: Roles,
    rule: MlpRule,
    temperature: float = SOFTMAX_TEMPERATURE,
    on_state: Callable[[int, torch.Tensor], None] | None = None,
    keep: int | None = None,
) -> torch.Tensor:
    """Carry a decomposition of residual state `start` to state `end` (end ≥ start); returns the new C (M, N, D).

    With `keep`, only position `keep` of the end state is wanted: once no attention step is left, the remaining
    steps run at that position alone and the result is (M, 1, D).
    """
    rows = ALL
    live_MN = live_rows(C_MND, roles)
    for state in range(start, end):
        narrow = keep is not None and rows == ALL and not any(s % 2 == 0 for s in range(state + 1, end))
        if narrow:
            assert keep is not None
            rows = slice(keep, keep + 1)
            if state % 2 == 0:  # attention: every key position in, the kept query out
                out_MND = step(model, trace, state, C_MND, roles, rule, temperature, rows, live_MN)
                live_MN = attention_live(live_MN)[:, rows]
                C_MND = C_MND[:, rows] + out_MND
            else:
                C_MND, live_MN = C_MND[:, rows], live_MN[:, rows]
                C_MND = C_MND + step(model, trace, state, C_MND, roles, rule, temperature, rows, live_MN)
        else:
            C_MND = C_MND + step(model, trace, state, C_MND, roles, rule, temperature, rows, live_MN)
            if state % 2 == 0:
                live_MN = attention_live(live_MN)
        if on_state is not None:
            on_state(state + 1, C_MND)
    if keep is not None and rows == ALL:
        rows = slice(keep, keep + 1)
        C_MND = C_MND[:, rows]
    check_sum(C_MND, trace.state(end)[rows], f"residual state {end}")
    return C_MND


def check_sum(C_MND: torch.Tensor, clean_ND: torch.Tensor, where: str) -> None:
    """Raise DecompositionMismatchError when the components do not sum to the clean tensor."""
    err = float((C_MND.sum(0) - clean_ND).abs().max())
    rms = float(clean_ND.pow(2).mean().sqrt()) + 1e-12
    if err > MISMATCH_TOL * rms:
        raise DecompositionMismatchError(
            f"components miss the clean {where} by {err:.3g} (rms {rms:.3g}): the model's weights were processed "
            "differently from the cached forward, or the block layout is unsupported; load the model without "
            "extra weight processing (from_pretrained_no_processing) and retry."
        )
