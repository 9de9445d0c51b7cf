"""Feature selections as the commands take them: `--features all`, `0-49`, `3,7,9` or a mix like `0-9,20`.

parse_features("0-2,7", d_sae=16)   # [0, 1, 2, 7]
"""

from __future__ import annotations

from sae_workbench.errors import WorkbenchError


class FeatureSpecError(WorkbenchError):
    """A feature selection is malformed, empty, or names features the SAE does not have."""


def parse_features(spec: str, d_sae: int) -> list[int]:
    """'all', '0-49', '3,7,9' or a mix like '0-9,20' → sorted, distinct feature indices within [0, d_sae)."""
    if spec.strip().lower() == "all":
        return list(range(d_sae))
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError(part)
                if lo < 0 or hi >= d_sae:  # checked before the range is built: 0-100000000 must not allocate
                    raise FeatureSpecError(
                        f"features {part} reach outside 0..{d_sae - 1} for this SAE (d_sae={d_sae})"
                    )
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise FeatureSpecError(
                f"bad --features {spec!r}: use 'all', a range '0-49', a list '3,7,9' or a mix '0-9,20'"
            ) from None
    if not out:
        raise FeatureSpecError(f"--features {spec!r} selects no feature; use 'all', '0-49' or '3,7,9'")
    bad = sorted(f for f in out if not 0 <= f < d_sae)
    if bad:
        raise FeatureSpecError(f"features {bad[:5]} are outside 0..{d_sae - 1} for this SAE (d_sae={d_sae})")
    return sorted(out)
