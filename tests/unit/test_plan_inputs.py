"""Every input of `kvtop plan` is bounded: a bad config.json, weights index, GPU size or launch
argument is one sentence with exit status 1 (unreadable) or 2 (bad usage), never a traceback,
and SGLang's flags are read as SGLang's own argparse reads them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kvtop.model.sizing.launch_args import LaunchArgsError, parse_launch_args, sglang_flags
from kvtop.plan.cli import main_plan
from tests.support.paths import FIXTURES

QWEN: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
WEIGHTS = 16 << 30


def model_dir(tmp_path: Path, config: dict[str, Any] | str, total: object = WEIGHTS) -> Path:
    where = tmp_path / "model"
    where.mkdir(exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config)
    (where / "config.json").write_text(text)
    index = total if isinstance(total, str) else json.dumps(total)
    (where / "model.safetensors.index.json").write_text(
        f'{{"metadata": {{"total_size": {index}}}}}'
    )
    return where


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main_plan(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


# --------------------------------------------------------------------------- config.json


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("num_hidden_layers", 0, "'num_hidden_layers' is 0, and no model has 0 of it"),
        ("head_dim", 0, "'head_dim' is 0, and no model has 0 of it"),
        ("num_key_value_heads", 0, "'num_key_value_heads' is 0, and no model has 0 of it"),
        ("num_attention_heads", 0, "'num_attention_heads' is 0, and no model has 0 of it"),
        ("num_hidden_layers", 10**400, "'num_hidden_layers' is 100000000000… (401 digits)"),
        ("head_dim", 10**7, "'head_dim' is 10,000,000, past 1,000,000 (no model has"),
        ("num_key_value_heads", 10**400, "past 100,000 (no model has that many)"),
        ("max_position_embeddings", 10**400, "past 100,000,000 (no model has that many)"),
        ("sliding_window", 10**400, "'sliding_window' is"),
    ],
)
def test_a_config_dimension_out_of_range_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: int, said: str
) -> None:
    where = model_dir(tmp_path, {**QWEN, key: value})
    status, err = run(capsys, "--model", str(where), "--gpu-memory", "80")
    assert status == 1
    assert said in err


def test_hidden_size_zero_without_head_dim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {k: v for k, v in QWEN.items() if k != "head_dim"} | {"hidden_size": 0}
    status, err = run(capsys, "--model", str(model_dir(tmp_path, config)), "--gpu-memory", "80")
    assert status == 1
    assert "'hidden_size' is 0, and no model has 0 of it" in err


def test_hidden_size_below_the_heads_is_a_zero_head_dim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {k: v for k, v in QWEN.items() if k != "head_dim"} | {"hidden_size": 8}
    status, err = run(capsys, "--model", str(model_dir(tmp_path, config)), "--gpu-memory", "80")
    assert status == 1
    assert "leaves a head dimension of 0" in err


def test_mla_kv_lora_rank_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {**QWEN, "kv_lora_rank": 0, "qk_rope_head_dim": 64}
    status, err = run(capsys, "--model", str(model_dir(tmp_path, config)), "--gpu-memory", "80")
    assert status == 1
    assert "'kv_lora_rank' is 0, and no model has 0 of it" in err


def test_num_nextn_predict_layers_zero_is_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {**QWEN, "num_nextn_predict_layers": 0}
    status, _ = run(capsys, "--model", str(model_dir(tmp_path, config)), "--gpu-memory", "80")
    assert status == 0


def test_deeply_nested_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = model_dir(tmp_path, "[" * 100_000 + "]" * 100_000)
    status, err = run(capsys, "--model", str(where), "--gpu-memory", "80")
    assert status == 1
    assert "nests its JSON too deep to read" in err


def test_an_integer_past_pythons_digit_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = model_dir(tmp_path, '{"num_hidden_layers": ' + "9" * 5000 + "}")
    status, err = run(capsys, "--model", str(where), "--gpu-memory", "80")
    assert status == 1
    assert "is not valid JSON" in err


def test_a_config_over_4_mib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = model_dir(tmp_path, json.dumps({**QWEN, "pad": "x" * (5 << 20)}))
    status, err = run(capsys, "--model", str(where), "--gpu-memory", "80")
    assert status == 1
    assert "is over 4 MiB: a config.json is far smaller" in err


def test_a_swa_ratio_that_does_not_fit_a_float_is_left_out(tmp_path: Path) -> None:
    from kvtop.plan.gather import read_model

    info = read_model(str(model_dir(tmp_path, {**QWEN, "swa_full_tokens_ratio": 10**400})))
    assert info.shape.swa_full_tokens_ratio is None


# --------------------------------------------------------------------------- weights index


@pytest.mark.parametrize(
    ("total", "shown"),
    [
        ("NaN", "nan"),
        ("Infinity", "inf"),
        ("1e400", "inf"),
        ("1e30", "1e+30"),
        ("-5", "-5"),
        ("0", "0"),
        ('"16GB"', "'16GB'"),
        ("true", "True"),
        (str(200 << 40), str(200 << 40)),
    ],
)
def test_the_weights_total_size_must_be_a_checkpoints_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], total: str, shown: str
) -> None:
    where = model_dir(tmp_path, QWEN, total)
    status, err = run(capsys, "--model", str(where), "--gpu-memory", "80")
    assert status == 1
    assert f"metadata.total_size {shown} is not a checkpoint's size in bytes" in err
    assert "at most 100 TiB" in err


# --------------------------------------------------------------------------- --model paths


def test_model_dev_zero_is_not_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(capsys, "--model", "/dev/zero", "--gpu-memory", "80")
    assert status == 1
    assert "--model /dev/zero is a character device, not a regular file or a directory" in err


def test_model_fifo_is_refused_without_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    status, err = run(capsys, "--model", str(fifo), "--gpu-memory", "80")
    assert status == 1
    assert "is a named pipe, not a regular file or a directory" in err


def test_config_json_that_is_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").mkdir()
    status, err = run(capsys, "--model", str(tmp_path), "--gpu-memory", "80")
    assert status == 1
    assert "config.json is a directory, not a regular file: give the model's config.json" in err


# --------------------------------------------------------------------------- --gpu-memory


@pytest.mark.parametrize("gib", ["1e-300", "1", "3.9", "-3", "nan", "inf", "4097", "1e400"])
def test_gpu_memory_outside_4_to_4096_gib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gib: str
) -> None:
    where = model_dir(tmp_path, QWEN)
    status, err = run(capsys, "--model", str(where), "--gpu-memory", gib, "--", "--tp-size", "8")
    assert status == 2
    assert f"--gpu-memory {float(gib):g}: give one GPU's memory in GiB, from 4 to 4096" in err


def test_gpu_memory_help_says_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_plan(["--help"]) == 0
    assert "from 4 to 4096" in " ".join(capsys.readouterr().out.split())


# --------------------------------------------------------------------------- launch arguments


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (
            ["--tp-size", "99999999999999999999"],
            "--tp-size '99999999999999999999': must be at most 1,024: no SGLang launch spans",
        ),
        (["--tp-size", "16000"], "--tp-size '16000': must be at most 1,024"),
        (["--pp-size", "257"], "--pp-size '257': must be at most 256"),
        (["--dp-size", "5000"], "--dp-size '5000': must be at most 1,024"),
        (["--ep-size", "5000"], "--ep-size '5000': must be at most 1,024"),
        (
            ["--tp-size", "1024", "--pp-size", "8"],
            "--tp-size 1024 × --pp-size 8 is 8,192 GPUs for one model, more than any cluster "
            "gives one SGLang launch: TP × PP must be at most 4,096",
        ),
        (
            ["--tp-size", "8", "--dp-size", "16", "--enable-dp-attention"],
            "--dp-size 16 with --enable-dp-attention splits the attention of --tp-size 8 ranks: "
            "DP must be at most TP (8)",
        ),
        (
            ["--context-length", "1000000000000"],
            "--context-length '1000000000000': must be at most 100,000,000 tokens",
        ),
        (["--mem-fraction-static", "1"], "must be a fraction between 0 and 1"),
        (["--mem-fraction-static", "0"], "must be a fraction between 0 and 1"),
        (["--max-total-tokens", "1" + "0" * 30], "must be a whole number from 1 to"),
        (["--swa-full-tokens-ratio", "1e300"], "at most 1000"),
        (
            ["--pp", "3"],
            "ambiguous option: --pp could match --pp-size, --pp-max-micro-batch-size",
        ),
        (
            ["--foo", "1"],
            "unrecognized SGLang argument --foo (not a launch_server flag of SGLang 0.5.23)",
        ),
        (["--log", "info"], "ambiguous option: --log could match --log-level,"),
        (["--enable", "1"], "… (100 flags)"),
        (["--tp-size", "2", "--", "--x"], "a second `--`"),
        (["--dtype"], "needs a value"),
        (["--host"], "--host needs a value"),
    ],
)
def test_bad_launch_arguments_exit_2_with_a_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], words: list[str], said: str
) -> None:
    where = model_dir(tmp_path, QWEN)
    status, err = run(capsys, "--model", str(where), "--gpu-memory", "80", "--", *words)
    assert status == 2
    assert said in err
    assert len(err.strip().splitlines()) <= 2  # usage at most, and the sentence


def test_a_unique_prefix_stands_for_its_flag() -> None:
    given = parse_launch_args(["--tp", "8", "--mem-frac", "0.9", "--pipeline", "2"])
    assert given.values == {"tp_size": 8, "mem_fraction_static": 0.9, "pp_size": 2}
    assert parse_launch_args(["--trust-remote", "--log-level", "info"]).ignored == (
        "--trust-remote-code",
        "--log-level",
    )


def test_a_switch_does_not_swallow_the_next_word() -> None:
    # --trust-remote-code and --enable-hierarchical-cache take no value: --tp-size is read.
    given = parse_launch_args(
        ["--trust-remote-code", "--enable-hierarchical-cache", "--tp-size", "4"]
    )
    assert given.values == {"tp_size": 4}
    with pytest.raises(LaunchArgsError, match="is not a --flag"):
        parse_launch_args(["--trust-remote-code", "8"])


def test_list_valued_flags_take_every_word_up_to_the_next_flag() -> None:
    given = parse_launch_args(["--cuda-graph-bs-decode", "1", "2", "4", "--tp-size", "2"])
    assert given.values == {"tp_size": 2}
    assert given.ignored == ("--cuda-graph-bs-decode",)


def test_the_decode_graph_flag_of_0_5_23_is_the_graph_batch_size() -> None:
    assert parse_launch_args(["--cuda-graph-max-bs-decode", "64"]).values == {
        "cuda_graph_max_bs": 64
    }
    assert parse_launch_args(["--cuda-graph-max-bs", "64"]).values == {"cuda_graph_max_bs": 64}


def test_the_flags_file_is_sglangs() -> None:
    flags = sglang_flags()
    assert flags.version == "0.5.23"
    assert flags.kinds["--tp-size"] == "value"
    assert flags.kinds["--trust-remote-code"] == "switch"
    assert flags.kinds["--enable-dp-attention"] == "switch"
    assert flags.kinds["--no-enable-tf32-matmul"] == "switch"
    assert flags.kinds["--cuda-graph-bs-decode"] == "values"
    assert len(flags.kinds) > 500


def test_a_gpu_too_small_for_sglangs_own_default_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A 4 GiB card: SGLang's default reserve (512 + 2048 × 1.5 + 8 × 2 + 8 / 8 × 1024 MiB) is
    # more than the card, its default fraction negative: not_enough_memory, said in words.
    code = main_plan(
        [
            "--model",
            str(FIXTURES / "models" / "llama-3.1-8b-instruct"),
            "--gpu-memory",
            "4",
            "--json",
            "--",
            "--tp-size",
            "8",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 5
    assert data["mem_fraction_static"] < 0
    assert "not above 0" in data["verdict"]["reasons"][0]


def test_a_context_whose_request_table_cannot_fit_names_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 100,000,000 tokens of context: SGLang's req_to_token table (requests × context, int32)
    # is far larger than the GPU; the verdict names it and its fix, each flag once.
    code = main_plan(
        [
            "--model",
            str(FIXTURES / "models" / "llama-3.1-8b-instruct"),
            "--gpu-memory",
            "80",
            "--json",
            "--",
            "--context-length",
            "100000000",
        ]
    )
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert code == 4 and verdict["kind"] == "oom_risk"
    assert "the largest is the request table" in verdict["reasons"][0]
    assert verdict["fixes"][0].startswith("a smaller --context-length or --max-running-requests")
    assert sum(fix.startswith("--tp-size") for fix in verdict["fixes"]) == 1
