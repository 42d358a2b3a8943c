"""The weights per rank from a downloaded checkpoint's safetensors headers: each tensor's stored
bytes placed by its name, through `kvtop plan` on a model directory with shards.

The shards are written in the safetensors format (an 8-byte little-endian header length, the
JSON header, the data); only the header is read, so the data is left sparse (a seek past it).
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path

from kvtop.model.sizing.tensor_share import part_of, share_from_tensors
from kvtop.model.sizing.weights_estimate import DictConfigView, RankLayout
from kvtop.plan.cli import main_plan
from kvtop.sources.safetensors_headers import tensor_bytes

GIB = 1 << 30
CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 2,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 768,
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


def write_shard(path: Path, tensors: dict[str, int]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, size in tensors.items():
        header[name] = {
            "dtype": "BF16",
            "shape": [size // 2],
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.seek(offset - 1, 1)
        f.write(b"\0")


def checkpoint(
    directory: Path, shards: dict[str, dict[str, int]], config: dict | None = None
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config or CONFIG))
    weight_map = {}
    for shard, tensors in shards.items():
        write_shard(directory / shard, tensors)
        weight_map.update({name: shard for name in tensors})
    total = sum(sum(t.values()) for t in shards.values())
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    return directory


MIB = 1 << 20
TENSORS = {
    "model.embed_tokens.weight": 600 * MIB,
    "lm_head.weight": 600 * MIB,
    "model.norm.weight": 1 * MIB,
    "model.layers.0.self_attn.q_proj.weight": 16 * MIB,
    "model.layers.0.self_attn.k_proj.weight": 2 * MIB,
    "model.layers.0.input_layernorm.weight": 1 * MIB,
    "model.layers.0.mlp.gate.weight": 1 * MIB,
    "model.layers.0.mlp.experts.0.down_proj.weight": 400 * MIB,
    "model.layers.1.self_attn.q_proj.weight": 16 * MIB,
    "model.layers.1.mlp.experts.0.down_proj.weight": 400 * MIB,
    # An MTP layer after the decoder's: the draft's, not the target's.
    "model.layers.2.mlp.experts.0.down_proj.weight": 400 * MIB,
}


def test_headers_read_without_the_data(tmp_path: Path) -> None:
    where = checkpoint(tmp_path / "m", {"a.safetensors": TENSORS})
    assert tensor_bytes(where, {n: "a.safetensors" for n in TENSORS}) == TENSORS


def test_a_missing_shard_reads_nothing(tmp_path: Path) -> None:
    where = checkpoint(tmp_path / "m", {"a.safetensors": TENSORS})
    assert tensor_bytes(where, {"x": "a.safetensors", "y": "b.safetensors"}) is None


def test_a_header_that_is_not_safetensors_reads_nothing(tmp_path: Path) -> None:
    where = tmp_path / "m"
    where.mkdir()
    (where / "a.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    assert tensor_bytes(where, None) is None
    (where / "a.safetensors").write_bytes(
        struct.pack("<Q", 30) + b'{"t": {"data_offsets": [4, 1]}}'
    )
    assert tensor_bytes(where, None) is None


def test_parts_by_name() -> None:
    assert part_of("model.layers.3.mlp.experts.17.gate_proj.qweight") == "experts"
    assert part_of("model.layers.3.mlp.gate.weight") == "experts"
    assert part_of("model.layers.3.self_attn.o_proj.scales") == "attention"
    assert part_of("model.layers.3.linear_attn.A_log") == "attention"
    assert part_of("model.layers.3.post_attention_layernorm.weight") == "norms"
    assert part_of("model.visual.blocks.0.attn.qkv.weight") == "vision tower"
    assert part_of("model.language_model.embed_tokens.weight") == "embeddings"
    assert part_of("mtp.layers.0.mlp.gate_proj.weight") is None


def test_the_most_loaded_rank_under_dp_attention() -> None:
    """DP 4 attention on TP 4: attention and embeddings whole, experts and lm_head over 4,
    norms and the router whole; the MTP layer left out."""
    layout = RankLayout(tp=4, attn_tp=1)
    share = share_from_tensors(TENSORS, DictConfigView(CONFIG), layout)
    whole = 600 + 1 + 16 + 2 + 1 + 1 + 16
    split = (600 + 400 + 400) / 4
    assert share.bytes == round((whole + split) * MIB)
    assert share.total_bytes == sum(TENSORS.values()) - 400 * MIB
    assert "lm_head over 4" in share.words()


def test_pipeline_stages_take_their_layers() -> None:
    share = share_from_tensors(TENSORS, DictConfigView(CONFIG), RankLayout(tp=1, pp=2))
    first = 600 + 16 + 2 + 1 + 1 + 400
    last = 600 + 1 + 16 + 400
    assert share.bytes == max(first, last) * MIB


def test_the_plan_takes_the_tensors(tmp_path: Path) -> None:
    """`kvtop plan` on a directory with its shards: the most loaded rank's weights are the
    tensors' own, not the config's estimate of the split."""
    where = checkpoint(tmp_path / "m", {"a.safetensors": TENSORS})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main_plan(
            [
                "--model",
                str(where),
                "--gpu-memory",
                "80",
                "--json",
                "--sglang-version",
                "0.5.14",
                "--",
                "--tp-size",
                "4",
                "--dp-size",
                "4",
                "--enable-dp-attention",
            ]
        )
    assert status in (0, 3, 4)
    plan = json.loads(out.getvalue())
    whole = 600 + 1 + 16 + 2 + 1 + 1 + 16
    expected = (whole + (600 + 400 + 400) / 4) * MIB / GIB
    assert plan["ranks"][0]["weights_gib"] == round(expected, 2)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        main_plan(
            [
                *("--model", str(where), "--gpu-memory", "80", "--width", "200"),
                *("--sglang-version", "0.5.14", "--", "--tp-size", "4", "--dp-size", "4"),
                "--enable-dp-attention",
            ]
        )
    assert "from the checkpoint's tensors (safetensors headers)" in " ".join(
        text.getvalue().split()
    )
