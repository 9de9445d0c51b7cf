"""Save and load SAEs: the SAELens folder format, SAELens registry ids, sparsify and Gemma Scope files.

sae = load_sae("runs/topk-8x")                      # SAELens folder (cfg.json + sae_weights.safetensors)
sae = load_sae("gemma-scope-2b-pt-res-canonical/layer_12/width_16k/canonical")   # registry id (hub)
sae = load_sae("path/to/sparsify/layers.3")         # sparsify folder (cfg.json + sae.safetensors)
sae = load_sae("path/to/params.npz", hook="blocks.3.hook_resid_post")   # Gemma Scope file
check_sae_matches(sae, model, "blocks.3.hook_resid_post")
hook = resolve_hook(sae, None)                       # --hook not given: the hook the SAE's cfg records
sae_id = compute_sae_id(sae, "smollm2-135m", "blocks.3.hook_resid_post")
sae_id = sae_id_of(sae, "smollm2-135m", "blocks.3.hook_resid_post", "runs/topk-8x")   # read back from training
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from packaging.version import InvalidVersion, Version
from sae_lens import SAE, TrainingSAE
from sae_lens.registry import SAE_CLASS_REGISTRY
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from transformer_lens import HookedTransformer

from sae_workbench.defaults import DEFAULT_HOOK
from sae_workbench.errors import WorkbenchError
from sae_workbench.models import hook_shape

log = logging.getLogger(__name__)

CFG_FILENAME = "cfg.json"
WEIGHTS_FILENAME = "sae_weights.safetensors"
SPARSITY_FILENAME = "sparsity.safetensors"
SPARSIFY_WEIGHTS_FILENAME = "sae.safetensors"
GEMMA_SCOPE_FILENAMES = ("params.npz", "params.safetensors")
# SAELens folders written by sae-lens < 7 load (pre-6 configs through sae-lens's own defaulting); 7+ is unknown.
MAX_SAE_LENS_MAJOR = 6
SAE_ID_LENGTH = 16
TRAIN_RESULT_FILENAME = "train_result.json"
"""Written by `train_sae` next to the SAE; records the SAE's id (with the model, hook and shapes it was made for)."""
# Config fields that change what an SAE computes (hashed into its id when its inference config has them).
_ID_SETTINGS = (
    "d_in",
    "d_sae",
    "k",
    "apply_b_dec_to_input",
    "normalize_activations",
    "reshape_activations",
    "rescale_acts_by_decoder_norm",
)


class SAELoadError(WorkbenchError):
    """An SAE could not be found or read."""


class SAEFileCorruptError(SAELoadError):
    """An SAE weights file is truncated, corrupt, or lacks tensors its config needs."""


class UnknownArchitectureError(SAELoadError):
    """An SAE config names an architecture sae-lens does not know."""


class UnsupportedSAEVersionError(SAELoadError):
    """An SAE config comes from a format version this workbench cannot read."""


class SAENonFiniteError(SAELoadError):
    """An SAE's weights hold NaN or infinite values (every activation it computes would be NaN)."""


class SAEIdError(WorkbenchError):
    """An SAE id was asked for without the model or hook the SAE reads (both are part of the id)."""


class SAEShapeMismatchError(WorkbenchError):
    """An SAE's input width does not match the activation width of the hook it is applied to."""


def save_sae(sae: SAE[Any], folder: Path, log_sparsity_F: torch.Tensor | None = None) -> Path:
    """Write `sae` as a SAELens folder (cfg.json + sae_weights.safetensors + sparsity.safetensors); return it.

    Training SAEs are saved in their inference form (BatchTopK/Matryoshka become JumpReLU with the learned threshold),
    exactly as sae-lens's runner saves them. `log_sparsity_F` is log10 of each feature's firing frequency
    (sae-lens's convention); when None a vector of -10 (never fired / unknown) is written so the folder is complete.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(sae, TrainingSAE):
        sae.save_inference_model(str(folder))
    else:
        sae.save_model(str(folder))
    if log_sparsity_F is None:
        log_sparsity_F = torch.full((sae.cfg.d_sae,), -10.0)
    save_file(
        {"sparsity": log_sparsity_F.detach().float().cpu().contiguous()}, str(folder / SPARSITY_FILENAME)
    )
    return folder


def _check_safetensors(path: Path) -> None:
    """Raise SAEFileCorruptError unless `path` is a complete safetensors file whose tensors all read."""
    try:
        with safe_open(str(path), framework="pt") as fh:  # type: ignore[no-untyped-call]
            for key in fh.keys():
                fh.get_tensor(key)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise SAEFileCorruptError(
            f"{path} is not a readable safetensors file ({exc}); it is probably truncated or corrupt — "
            "re-download or re-train the SAE."
        ) from exc


def _check_cfg(cfg: dict[str, Any], path: Path) -> None:
    """Reject configs from unsupported versions and unknown architectures, with what to do."""
    version = cfg.get("sae_lens_version") or (cfg.get("metadata") or {}).get("sae_lens_version")
    if version is not None:
        try:
            major = Version(str(version)).major
        except InvalidVersion as exc:
            raise UnsupportedSAEVersionError(
                f"{path} has an unreadable sae_lens_version {version!r}."
            ) from exc
        if major > MAX_SAE_LENS_MAJOR:
            raise UnsupportedSAEVersionError(
                f"{path} was written by sae-lens {version}; this workbench reads SAELens folders from sae-lens "
                f"<= {MAX_SAE_LENS_MAJOR}.x. Re-save it with sae-lens 6 or upgrade the workbench."
            )
    missing = [k for k in ("d_in", "d_sae") if k not in cfg]
    if missing:
        raise UnsupportedSAEVersionError(
            f"{path} lacks {missing}: it is not a SAELens cfg.json (sparsify folders hold sae.safetensors, "
            "Gemma Scope folders params.npz)."
        )
    arch = cfg.get("architecture")
    if arch is not None and arch not in SAE_CLASS_REGISTRY:
        raise UnknownArchitectureError(
            f"{path} names architecture {arch!r}; known: {', '.join(sorted(SAE_CLASS_REGISTRY))}. "
            "Convert the SAE to one of these or register its class with sae_lens.register_sae_class."
        )


def _load_sae_lens_folder(folder: Path, device: str) -> SAE[Any]:
    """Load a SAELens folder after checking its files, turning sae-lens's errors into typed ones."""
    cfg_path, weights = folder / CFG_FILENAME, folder / WEIGHTS_FILENAME
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise SAEFileCorruptError(f"{cfg_path} is not valid JSON ({exc}).") from exc
    _check_cfg(cfg, cfg_path)
    _check_safetensors(weights)
    try:
        return SAE.load_from_disk(str(folder), device=device)
    except KeyError as exc:
        raise UnknownArchitectureError(f"{cfg_path}: sae-lens cannot build this SAE ({exc}).") from exc
    except RuntimeError as exc:  # load_state_dict: missing/unexpected/mis-shaped tensors
        raise SAEFileCorruptError(f"{weights} does not match {cfg_path}: {exc}") from exc


def _hook_from_folder_name(name: str) -> str | None:
    """`layers.3` / `layer_3` → blocks.3.hook_resid_post (sparsify and Gemma Scope name folders by layer)."""
    match = re.search(r"layers?[._](\d+)", name)
    return f"blocks.{match.group(1)}.hook_resid_post" if match else None


def _build_sae(cfg: dict[str, Any], state: dict[str, torch.Tensor], device: str) -> SAE[Any]:
    """Instantiate a SAELens SAE from a config dict and a state dict."""
    sae = SAE.from_dict(cfg)
    try:
        sae.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=True)
    except RuntimeError as exc:
        raise SAEFileCorruptError(f"converted weights do not fit a {cfg['architecture']} SAE: {exc}") from exc
    return sae.to(device)


def load_sparsify(folder: Path, device: str = "cpu", hook: str | None = None) -> SAE[Any]:
    """Convert a sparsify folder (cfg.json + sae.safetensors, TopK) into a SAELens TopK SAE.

    sparsify encodes `relu(encoder(x - b_dec))`, keeps the top k and decodes `acts @ W_dec + b_dec`, which is
    SAELens's TopK with `apply_b_dec_to_input=True`.
    """
    cfg_raw = json.loads((folder / CFG_FILENAME).read_text())
    weights = folder / SPARSIFY_WEIGHTS_FILENAME
    _check_safetensors(weights)
    if cfg_raw.get("activation", "topk") != "topk" or cfg_raw.get("transcode") or cfg_raw.get("signed"):
        raise UnknownArchitectureError(
            f"{folder}: only sparsify TopK SAEs convert (got activation={cfg_raw.get('activation')!r}, "
            f"transcode={cfg_raw.get('transcode')}, signed={cfg_raw.get('signed')})."
        )
    from safetensors.torch import load_file

    raw = load_file(str(weights))
    enc_FD = raw["encoder.weight"]
    d_sae, d_in = enc_FD.shape
    state = {
        "W_enc": enc_FD.T.contiguous(),
        "b_enc": raw.get("encoder.bias", torch.zeros(d_sae)),
        "W_dec": raw["W_dec"],
        "b_dec": raw.get("b_dec", torch.zeros(d_in)),
    }
    hook = hook or _hook_from_folder_name(folder.name)
    cfg = {
        "architecture": "topk",
        "d_in": int(d_in),
        "d_sae": int(d_sae),
        "k": int(cfg_raw["k"]),
        "apply_b_dec_to_input": True,
        "metadata": {"hook_name": hook, "converted_from": "sparsify", "source": str(folder)},
    }
    return _build_sae(cfg, state, device)


def load_gemma_scope(path: Path, device: str = "cpu", hook: str | None = None) -> SAE[Any]:
    """Convert a Gemma Scope file (params.npz or params.safetensors: W_enc, W_dec, b_enc, b_dec, threshold) into a
    SAELens JumpReLU SAE. Gemma Scope does not subtract b_dec before encoding (Lieberum et al. 2024, Gemma Scope)."""
    if path.is_dir():
        found = [path / n for n in GEMMA_SCOPE_FILENAMES if (path / n).exists()]
        if not found:
            raise SAELoadError(f"{path} has no {' or '.join(GEMMA_SCOPE_FILENAMES)}.")
        path = found[0]
    if path.suffix == ".npz":
        try:
            with np.load(path) as data:
                raw = {k: torch.from_numpy(np.array(data[k], dtype=np.float32)) for k in data.files}
        except (ValueError, OSError, EOFError) as exc:
            raise SAEFileCorruptError(f"{path} is not a readable .npz file ({exc}).") from exc
    else:
        _check_safetensors(path)
        from safetensors.torch import load_file

        raw = load_file(str(path))
    needed = {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"}
    if not needed <= set(raw):
        raise SAEFileCorruptError(f"{path} lacks Gemma Scope tensors {sorted(needed - set(raw))}.")
    d_in, d_sae = raw["W_enc"].shape
    hook = hook or _hook_from_folder_name(str(path.parent))
    cfg = {
        "architecture": "jumprelu",
        "d_in": int(d_in),
        "d_sae": int(d_sae),
        "apply_b_dec_to_input": False,
        "metadata": {"hook_name": hook, "converted_from": "gemma_scope", "source": str(path)},
    }
    return _build_sae(cfg, {k: raw[k] for k in needed}, device)


def _mirror_loader(
    mirror: Path, loader_name: str
) -> Callable[..., tuple[dict[str, Any], dict[str, Any], Any]]:
    """A sae-lens hub loader that reads `<mirror>/<repo_id>/<folder>` instead of downloading (offline use)."""
    from sae_lens.loading.pretrained_sae_loaders import sae_lens_disk_loader

    def load(
        repo_id: str, folder_name: str, device: str = "cpu", force_download: bool = False, cfg_overrides=None
    ):
        del force_download
        folder = mirror / repo_id / folder_name
        if not folder.exists():
            raise SAELoadError(f"local mirror has no {folder}; copy the hub folder there or drop --mirror.")
        if loader_name != "sae_lens":
            raise SAELoadError(
                f"offline mirrors support SAELens-format releases only (this one uses {loader_name})."
            )
        _check_safetensors(folder / WEIGHTS_FILENAME)
        cfg, state = sae_lens_disk_loader(folder, device, cfg_overrides=cfg_overrides)
        sparsity = folder / SPARSITY_FILENAME
        log_sparsity = None
        if sparsity.exists():
            from safetensors.torch import load_file

            log_sparsity = load_file(str(sparsity))["sparsity"]
        return cfg, state, log_sparsity

    return load


def load_registry_sae(release: str, sae_id: str, device: str = "cpu", mirror: Path | None = None) -> SAE[Any]:
    """Load a SAELens registry SAE (release + sae_id from sae-lens's pretrained_saes.yaml) from the hub, or from a
    local mirror laid out as `<mirror>/<repo_id>/<folder>` when there is no hub access."""
    from sae_lens.loading.pretrained_sae_loaders import get_conversion_loader_name
    from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory

    directory = get_pretrained_saes_directory()
    if release not in directory:
        raise SAELoadError(
            f"{release!r} is not a SAELens release; see sae_lens's pretrained_saes.yaml for names."
        )
    if sae_id not in directory[release].saes_map:
        valid = list(directory[release].saes_map)[:5]
        raise SAELoadError(f"{sae_id!r} is not in release {release!r}; valid ids include {valid}.")
    converter = None
    if mirror is not None:
        converter = _mirror_loader(Path(mirror), get_conversion_loader_name(release))
    try:
        return SAE.from_pretrained(release, sae_id, device=device, converter=converter)  # type: ignore[arg-type]
    except OSError as exc:
        raise SAELoadError(
            f"could not download {release}/{sae_id} ({exc}); the hub needs network access — pass a local "
            "SAELens folder or a mirror folder instead."
        ) from exc


def check_finite_weights(sae: SAE[Any], source: str | Path) -> None:
    """Raise SAENonFiniteError naming every tensor of the SAE that holds a NaN or an infinity."""
    bad = {
        name: int((~torch.isfinite(tensor)).sum())
        for name, tensor in sae.state_dict().items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    }
    if bad:
        where = ", ".join(f"{name} ({n:,} values)" for name, n in sorted(bad.items()))
        raise SAENonFiniteError(
            f"the SAE at {source} has non-finite weights in {where}; every activation it computes would be NaN. "
            "Re-train it, or restore the weights file from a good copy."
        )


def load_sae(
    spec: str | Path, device: str = "cpu", hook: str | None = None, mirror: Path | None = None
) -> SAE[Any]:
    """Load an SAE from a SAELens folder, a sparsify folder, a Gemma Scope file/folder, or a registry id
    "release/sae_id". `hook` names the hook for converted formats that do not record it. Weights holding a NaN or
    an infinity are refused (SAENonFiniteError)."""
    sae = _load_any(spec, device, hook, mirror)
    check_finite_weights(sae, spec)
    return sae


def _load_any(spec: str | Path, device: str, hook: str | None, mirror: Path | None) -> SAE[Any]:
    """load_sae without the finiteness check."""
    path = Path(spec).expanduser()
    if path.is_file() and path.name in GEMMA_SCOPE_FILENAMES:
        return load_gemma_scope(path, device, hook)
    if path.is_dir():
        if (path / CFG_FILENAME).exists() and (path / WEIGHTS_FILENAME).exists():
            return _load_sae_lens_folder(path, device)
        if (path / CFG_FILENAME).exists() and (path / SPARSIFY_WEIGHTS_FILENAME).exists():
            return load_sparsify(path, device, hook)
        if any((path / n).exists() for n in GEMMA_SCOPE_FILENAMES):
            return load_gemma_scope(path, device, hook)
        if (path / CFG_FILENAME).exists():
            raise SAEFileCorruptError(
                f"{path} has cfg.json but no {WEIGHTS_FILENAME} or {SPARSIFY_WEIGHTS_FILENAME}."
            )
        raise SAELoadError(
            f"{path} holds no SAE (expected cfg.json + sae_weights.safetensors, or params.npz)."
        )
    text = str(spec)
    if "/" in text and not path.exists():
        release, sae_id = _split_registry_id(text)
        return load_registry_sae(release, sae_id, device, mirror)
    raise SAELoadError(
        f"{spec!r} is neither an SAE folder/file nor a SAELens registry id 'release/sae_id'. "
        "Pass a folder written by `workbench train`, a sparsify or Gemma Scope folder, or a registry id."
    )


def _split_registry_id(text: str) -> tuple[str, str]:
    """Split "release/sae_id"; releases may themselves be hub repo ids containing a slash."""
    from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory

    directory = get_pretrained_saes_directory()
    parts = text.split("/")
    for i in range(1, len(parts)):
        release = "/".join(parts[:i])
        if release in directory:
            return release, "/".join(parts[i:])
    return parts[0], "/".join(parts[1:])


def check_sae_matches(sae: SAE[Any], model: HookedTransformer, hook: str) -> None:
    """Raise SAEShapeMismatchError when the SAE's d_in differs from the hook's activation width."""
    shape = hook_shape(model, hook)
    # hook_z SAEs read the heads flattened; any other SAE reads the last dimension.
    width = math.prod(shape) if sae.cfg.reshape_activations == "hook_z" else shape[-1]
    if sae.cfg.d_in != width:
        raise SAEShapeMismatchError(
            f"SAE d_in={sae.cfg.d_in} but hook {hook} of model {model.cfg.model_name!r} has width {width}; "
            "pick the SAE trained for this model and hook, or the hook this SAE was trained on."
        )


def _cfg_dict(sae: SAE[Any] | dict[str, Any]) -> dict[str, Any]:
    """An SAE's config as a dict (a loaded SAE's `cfg.to_dict()`, or a cfg.json dict as is)."""
    return sae if isinstance(sae, dict) else sae.cfg.to_dict()


def _recorded(sae: SAE[Any] | dict[str, Any], key: str) -> str | None:
    """A name the SAE's cfg records under `metadata.<key>` (sae-lens 6) or at the top level (older cfgs)."""
    cfg = _cfg_dict(sae)
    for value in ((cfg.get("metadata") or {}).get(key), cfg.get(key)):
        if isinstance(value, str) and value.strip():
            return value
    return None


def recorded_hook(sae: SAE[Any] | dict[str, Any]) -> str | None:
    """The hook the SAE's cfg says it reads (`metadata.hook_name`, or `hook_name` in older cfgs), or None."""
    return _recorded(sae, "hook_name")


def recorded_model(sae: SAE[Any] | dict[str, Any]) -> str | None:
    """The model the SAE's cfg says it was trained on (`metadata.model_name`, or `model_name`), or None."""
    return _recorded(sae, "model_name")


def recorded_fingerprint(sae: SAE[Any] | dict[str, Any]) -> str | None:
    """The subject model's weights fingerprint the SAE's cfg records (`metadata.model_fingerprint`,
    `sae_workbench.model_identity.model_fingerprint`), or None."""
    return _recorded(sae, "model_fingerprint")


def resolve_hook(sae: SAE[Any] | dict[str, Any], hook: str | None) -> str:
    """The hook a command applies the SAE to: `hook` when given (--hook), else the one its cfg records, else the
    workbench's default hook."""
    if hook:
        return hook
    recorded = recorded_hook(sae)
    if recorded is not None:
        log.info("hook %s (from the SAE's cfg)", recorded)
        return recorded
    log.info("the SAE records no hook; using the default %s", DEFAULT_HOOK)
    return DEFAULT_HOOK


def require_model_and_hook(model_name: str, hook: str) -> None:
    """Raise SAEIdError unless both are non-empty names (an SAE's id hashes them with its weights)."""
    for what, value in (("model", model_name), ("hook", hook)):
        if not isinstance(value, str) or not value.strip():
            raise SAEIdError(
                f"an SAE id needs the {what} the SAE reads (got {value!r}); pass --model and --hook of the SAE."
            )


def compute_sae_id(sae: SAE[Any], model_name: str, hook: str) -> str:
    """Content hash (16 hex chars) of the SAE's weights, architecture settings, model name and hook.

    Weights are hashed in their saved (inference) form as float32, so the id is the same before saving and after
    loading, and changes whenever a weight, k, threshold, model or hook changes. `model_name` and `hook` are
    required (an SAE's id names what it reads): an empty one raises SAEIdError.
    """
    require_model_and_hook(model_name, hook)
    digest = hashlib.sha256()
    state = {k: v.detach().clone() for k, v in sae.state_dict().items()}
    if isinstance(sae, TrainingSAE):
        sae.process_state_dict_for_saving_inference(state)
        cfg_cls = sae.cfg.get_inference_config_class()
    else:
        cfg_cls = type(sae.cfg)
    cfg = sae.cfg.to_dict()
    inference_fields = {f.name for f in dataclasses.fields(cfg_cls)}
    settings: dict[str, Any] = {"architecture": cfg_cls.architecture(), "model": model_name, "hook": hook}
    for key in _ID_SETTINGS:
        if key in cfg and key in inference_fields:
            settings[key] = cfg[key]
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name in sorted(state):
        tensor = state[name].detach().to("cpu", torch.float32).contiguous()
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()[:SAE_ID_LENGTH]


def weights_digest(path: Path) -> str:
    """BLAKE2b (128-bit) of a weights file's bytes: the check that a recorded SAE id still describes the file.

    Every byte is read (a change anywhere, same size or not, changes the digest) but nothing is decoded or converted,
    so it costs a disk read at ~1 GB/s, a fraction of `compute_sae_id`.
    """
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def id_record(sae: SAE[Any], folder: Path, model_name: str, hook: str, sae_id: str) -> dict[str, Any]:
    """What `train_sae` records about the id of the SAE it saved in `folder` (see `recorded_sae_id`)."""
    return {
        "sae_id": sae_id,
        "model_name": model_name,
        "hook": hook,
        "d_in": int(sae.cfg.d_in),
        "d_sae": int(sae.cfg.d_sae),
        "weights_bytes": (Path(folder) / WEIGHTS_FILENAME).stat().st_size,
        "weights_blake2b": weights_digest(Path(folder) / WEIGHTS_FILENAME),
    }


def recorded_sae_id(folder: Path | str, sae: SAE[Any], model_name: str, hook: str) -> str | None:
    """The id training recorded in `folder`/train_result.json, or None when there is none for this SAE.

    The record counts only when it was made for the same model and hook, the SAE has the recorded d_in/d_sae and the
    weights file still has the recorded size and BLAKE2b digest (`weights_digest`: a read of the file, no tensor
    hashing), so a folder whose weights were replaced or edited in place, even at the same size, is rehashed. A record
    without a digest (written before it was recorded) is not trusted. `train_sae` removes the record before it
    overwrites the weights, so a killed run leaves none behind.
    """
    path = Path(folder) / TRAIN_RESULT_FILENAME
    weights = Path(folder) / WEIGHTS_FILENAME
    if not path.is_file() or not weights.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    expected = {
        "model_name": model_name,
        "hook": hook,
        "d_in": int(sae.cfg.d_in),
        "d_sae": int(sae.cfg.d_sae),
        "weights_bytes": weights.stat().st_size,
    }
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in expected.items()):
        return None
    if record.get("weights_blake2b") != weights_digest(weights):
        log.info("%s no longer matches the weights it describes; rehashing the SAE", path)
        return None
    sae_id = record.get("sae_id")
    return sae_id if isinstance(sae_id, str) and len(sae_id) == SAE_ID_LENGTH else None


def sae_id_of(sae: SAE[Any], model_name: str, hook: str, source: str | Path | None = None) -> str:
    """The SAE's id: read back from its training record when `source` (where it was loaded from) is a folder with
    one that matches (`recorded_sae_id`), else computed from the weights (`compute_sae_id`)."""
    if source is not None and Path(source).expanduser().is_dir():
        recorded = recorded_sae_id(Path(source).expanduser(), sae, model_name, hook)
        if recorded is not None:
            return recorded
    return compute_sae_id(sae, model_name, hook)
