"""DeepSeek-V4's compressed-attention pools, which kvtop's sizing formula does not model.

SGLang sizes them with a configurator of its own: the full pool gets (budget − fixed parts) /
bytes per full-pool token, and the SWA, c4 and c128 pools follow from it (the SWA ratio, one
c4 entry per 4 tokens, one c128 entry per 128). Its bytes per full-pool token come from the
model's compressed layers, indexer and compressor state, none of which the plain cell size or
the hybrid rules know; kvtop replays none of it and says so, rather than compare a formula that
does not apply with the logged pool.
"""

from __future__ import annotations

from kvtop.sglang.start_state import ModelMemory


def unmodelled_note(model: ModelMemory) -> str | None:
    """Why no max_total_num_tokens is predicted for a DeepSeek-V4 model; None for any other."""
    pools = model.dsv4
    if pools is None:
        return None
    per_token = ""
    if pools.bytes_per_full_token is not None:
        per_token = f" at {pools.bytes_per_full_token:,.2f} B per full-pool token"
        if pools.budget_gib is not None:
            per_token += f" of its {pools.budget_gib:.2f} GiB budget"
        per_token += " (as logged)"
    return (
        "DeepSeek-V4 compressed attention: SGLang sizes its full, SWA, c4 and c128 pools "
        f"together{per_token}; kvtop does not model that arithmetic, so it predicts no "
        "max_total_num_tokens and no what-if for this model."
    )
