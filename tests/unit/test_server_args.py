"""Tests for kvtop.sglang.server_args: the startup ``server_args=...`` line parser."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import math
import re
from pathlib import PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.server_args import (
    ServerArgs,
    parse_server_args,
    server_args_from_mapping,
    visible_deep,
)

CHAT_TEMPLATE = '{% if role == "user" %}[INST] it\'s (a, b) = c ] {{ x }}, done{% endif %}'

# A 0.5.8.post1-style line for the Kimi-K2.5 deployment (message after the log prefix).
KIMI_058 = (
    "server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', "
    "tokenizer_path='moonshotai/Kimi-K2.5', tokenizer_mode='auto', tokenizer_worker_num=1, "
    "skip_tokenizer_init=False, load_format=<LoadFormat.AUTO: 'auto'>, "
    "model_loader_extra_config='{}', trust_remote_code=True, context_length=262144, "
    "is_embedding=False, enable_multimodal=None, revision=None, model_impl='auto', "
    "host='0.0.0.0', port=30000, grpc_mode=False, skip_server_warmup=False, warmups=None, "
    "nccl_port=None, dtype='auto', quantization=None, quantization_param_path=None, "
    "kv_cache_dtype='auto', enable_fp32_lm_head=False, mem_fraction_static=0.88, "
    "max_running_requests=None, max_queued_requests=None, max_total_tokens=None, "
    "chunked_prefill_size=8192, enable_dynamic_chunking=False, max_prefill_tokens=16384, "
    "schedule_policy='fcfs', enable_priority_scheduling=False, "
    "schedule_low_priority_values_first=False, priority_scheduling_preemption_threshold=10, "
    "schedule_conservativeness=1.0, page_size=1, hybrid_kvcache_ratio=None, "
    "swa_full_tokens_ratio=0.8, disable_hybrid_swa_memory=False, radix_eviction_policy='lru', "
    "device='cuda', tp_size=8, pp_size=1, pp_max_micro_batch_size=None, stream_interval=1, "
    "stream_output=False, random_seed=1066312423, constrained_json_whitespace_pattern=None, "
    "constrained_json_disable_any_whitespace=False, watchdog_timeout=300, dist_timeout=None, "
    "download_dir=PosixPath('/data/hf-cache'), base_gpu_id=0, gpu_id_step=1, "
    "sleep_on_idle=False, log_level='info', log_level_http=None, log_requests=False, "
    "log_requests_level=2, crash_dump_folder=None, show_time_cost=False, enable_metrics=True, "
    "enable_metrics_for_all_schedulers=False, "
    "tokenizer_metrics_custom_labels_header='x-custom-labels', "
    "tokenizer_metrics_allowed_custom_labels=None, "
    "bucket_time_to_first_token=[0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, inf], "
    "bucket_inter_token_latency=None, bucket_e2e_request_latency=None, "
    "collect_tokens_histogram=False, prompt_tokens_buckets=None, "
    "generation_tokens_buckets=None, gc_warning_threshold_secs=0.0, decode_log_interval=40, "
    "enable_request_time_stats_logging=False, kv_events_config=None, enable_trace=False, "
    "otlp_traces_endpoint='localhost:4317', api_key='sk-live-very-secret', "
    "admin_api_key=None, served_model_name='kimi-k2.5', weight_version='default', "
    f"chat_template={CHAT_TEMPLATE!r}, completion_template=None, "
    "file_storage_path='sglang_storage', enable_cache_report=False, "
    "reasoning_parser='kimi_k2', tool_call_parser='kimi_k2', tool_server=None, "
    "sampling_defaults='model', dp_size=1, load_balance_method='round_robin', "
    "dist_init_addr=None, nnodes=1, node_rank=0, "
    'json_model_override_args=\'{"rope_scaling": {"type": "yarn", "factor": 4.0}, '
    '"note": "a=b, c)]"}\', '
    "preferred_sampling_params=None, enable_lora=None, max_lora_rank=None, "
    "lora_target_modules=None, lora_paths=None, max_loaded_loras=None, max_loras_per_batch=8, "
    "lora_backend='csgmv', attention_backend='flashinfer', decode_attention_backend=None, "
    "prefill_attention_backend=None, sampling_backend='flashinfer', "
    "grammar_backend='xgrammar', mm_attention_backend=None, speculative_algorithm='EAGLE3', "
    "speculative_draft_model_path='lightseekorg/kimi-k2.5-eagle3', "
    "speculative_draft_model_revision=None, speculative_draft_load_format=None, "
    "speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4, "
    "speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=1.0, "
    "speculative_token_map=None, speculative_attention_mode='prefill', ep_size=8, "
    "moe_a2a_backend='none', moe_runner_backend='auto', deepep_mode='auto', "
    "ep_num_redundant_experts=0, ep_dispatch_algorithm='static', "
    "init_expert_location='trivial', enable_eplb=False, eplb_algorithm='auto', "
    "eplb_rebalance_num_iterations=1000, deepep_config=None, moe_dense_tp_size=None, "
    "max_mamba_cache_size=None, mamba_ssm_dtype='float32', enable_hierarchical_cache=True, "
    "hicache_ratio=4.0, hicache_size=0, hicache_write_policy='write_through', "
    "hicache_io_backend='kernel', hicache_mem_layout='layer_first', "
    "hicache_storage_backend=None, hicache_storage_prefetch_policy='best_effort', "
    "hicache_storage_backend_extra_config=None, enable_lmcache=False, "
    "cuda_graph_max_bs=512, cuda_graph_bs=[1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64], "
    "disable_cuda_graph=False, disable_cuda_graph_padding=False, "
    "enable_profile_cuda_graph=False, enable_nccl_nvls=False, enable_dp_attention=False, "
    "enable_dp_lm_head=False, enable_two_batch_overlap=False, torch_compile_max_bs=32, "
    "triton_attention_num_kv_splits=8, "
    "disaggregation_mode='null', disaggregation_transfer_backend='mooncake', "
    "disaggregation_bootstrap_port=8998, disaggregation_decode_tp=None, "
    "num_reserved_decode_tokens=512, custom_weight_loader=[], "
    "model_checksum={'shards': ('a.safetensors', 'b.safetensors'), 'ok': {True, False}}, "
    "launch_hook=<function default_hook at 0x7f3a2c1e5d30>, "
    "weight_loader_disable_mmap=False, enable_pdmux=False, sm_group_num=8)"
)


def test_kimi_058_repr_typed_fields() -> None:
    args = parse_server_args(KIMI_058)
    assert args is not None
    assert args.form == "repr"
    assert args.truncated is False
    assert args.model_path == "moonshotai/Kimi-K2.5"
    assert args.tokenizer_path == "moonshotai/Kimi-K2.5"
    assert args.served_model_name == "kimi-k2.5"
    assert args.mem_fraction_static == 0.88
    assert args.tp_size == 8
    assert args.dp_size == 1
    assert args.pp_size == 1
    assert args.ep_size == 8
    assert args.attn_cp_size is None
    assert args.moe_dp_size is None
    assert args.enable_dp_attention is False
    assert args.page_size == 1
    assert args.kv_cache_dtype == "auto"
    assert args.dtype == "auto"
    assert args.context_length == 262144
    assert args.max_total_tokens is None
    assert args.max_running_requests is None
    assert args.chunked_prefill_size == 8192
    assert args.cuda_graph_max_bs == 512
    assert args.speculative_algorithm == "EAGLE3"
    assert args.speculative_draft_model_path == "lightseekorg/kimi-k2.5-eagle3"
    assert args.speculative_num_steps == 3
    assert args.speculative_eagle_topk == 1
    assert args.speculative_num_draft_tokens == 4
    assert args.enable_hierarchical_cache is True
    assert args.hicache_ratio == 4.0
    assert args.hicache_size == 0.0
    assert args.hicache_mem_layout == "layer_first"
    assert args.hicache_io_backend == "kernel"
    assert args.hicache_storage_backend is None
    assert args.enable_metrics is True
    assert args.host == "0.0.0.0"
    assert args.port == 30000
    assert args.base_gpu_id == 0
    assert args.api_key_set is True


def test_kimi_058_repr_raw_values() -> None:
    args = parse_server_args(KIMI_058)
    assert args is not None
    raw = args.raw
    assert list(raw)[:3] == ["model_path", "tokenizer_path", "tokenizer_mode"]
    assert list(raw)[-1] == "sm_group_num"
    assert raw["sm_group_num"] == 8
    assert raw["chat_template"] == CHAT_TEMPLATE
    assert json.loads(str(raw["json_model_override_args"])) == {
        "rope_scaling": {"type": "yarn", "factor": 4.0},
        "note": "a=b, c)]",
    }
    assert raw["load_format"] == "<LoadFormat.AUTO: 'auto'>"
    assert raw["download_dir"] == "PosixPath('/data/hf-cache')"
    assert raw["launch_hook"] == "<function default_hook at 0x7f3a2c1e5d30>"
    assert raw["cuda_graph_bs"] == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
    assert raw["custom_weight_loader"] == []
    assert raw["model_checksum"] == {
        "shards": ("a.safetensors", "b.safetensors"),
        "ok": {True, False},
    }
    # a list containing ``inf`` is not a literal: kept as its source text
    assert raw["bucket_time_to_first_token"] == "[0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, inf]"
    assert raw["schedule_conservativeness"] == 1.0
    assert raw["trust_remote_code"] is True
    assert raw["revision"] is None
    assert raw["api_key"] == "<redacted>"
    assert raw["admin_api_key"] is None
    logged_keys = ["model_path", *re.findall(r", ([a-z0-9_]+)=", KIMI_058)]
    assert list(raw) == logged_keys


def test_secret_never_appears_anywhere() -> None:
    args = parse_server_args(KIMI_058)
    assert args is not None
    assert "very-secret" not in repr(args)
    assert "very-secret" not in json.dumps(args.to_json())
    assert "very-secret" not in repr(dict(args.raw))


def test_to_json_is_typed_fields_only_and_json_safe() -> None:
    args = parse_server_args(KIMI_058)
    assert args is not None
    data = args.to_json()
    expected = [f.name for f in dataclasses.fields(ServerArgs)]
    assert list(data) == [n for n in expected if n not in ("raw", "form", "truncated")]
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["tp_size"] == 8
    assert data["api_key_set"] is True


def test_server_args_is_frozen_and_hashable() -> None:
    args = parse_server_args(KIMI_058)
    assert args is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.tp_size = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        args.raw["tp_size"] = 4  # type: ignore[index]
    assert hash(args) == hash(parse_server_args(KIMI_058))
    assert args == parse_server_args(KIMI_058)


def test_leading_spaces_and_trailing_newline() -> None:
    args = parse_server_args("   server_args=ServerArgs(tp_size=2, page_size=64)\n")
    assert args is not None
    assert args.tp_size == 2
    assert args.page_size == 64
    assert args.truncated is False


# 0.3.6-era: far fewer fields, same repr shape.
SHORT_036 = (
    "server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
    "tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_mode='auto', "
    "skip_tokenizer_init=False, load_format='auto', trust_remote_code=False, dtype='auto', "
    "kv_cache_dtype='auto', quantization=None, context_length=None, device='cuda', "
    "served_model_name='meta-llama/Llama-3.1-8B-Instruct', chat_template=None, "
    "is_embedding=False, host='127.0.0.1', port=30000, mem_fraction_static=0.88, "
    "max_running_requests=None, max_total_tokens=None, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, schedule_policy='lpm', schedule_conservativeness=1.0, "
    "tp_size=1, stream_interval=1, random_seed=42, constrained_json_whitespace_pattern=None, "
    "watchdog_timeout=300, download_dir=None, base_gpu_id=0, log_level='info', "
    "log_level_http=None, log_requests=False, show_time_cost=False, enable_metrics=False, "
    "decode_log_interval=40, api_key=None, file_storage_pth='SGLang_storage', "
    "enable_cache_report=False, dp_size=1, load_balance_method='round_robin', "
    "dist_init_addr=None, nnodes=1, node_rank=0, json_model_override_args='{}', "
    "enable_double_sparsity=False, ds_channel_config_path=None, lora_paths=None, "
    "max_loras_per_batch=8, attention_backend='flashinfer', sampling_backend='flashinfer', "
    "grammar_backend='outlines', disable_radix_cache=False, disable_jump_forward=False, "
    "disable_cuda_graph=False, disable_cuda_graph_padding=False, disable_disk_cache=False, "
    "disable_custom_all_reduce=False, disable_mla=False, disable_overlap_schedule=False, "
    "enable_mixed_chunk=False, enable_dp_attention=False, enable_torch_compile=False, "
    "torch_compile_max_bs=32, cuda_graph_max_bs=160, torchao_config='', "
    "enable_nan_detection=False, enable_p2p_check=False, triton_attention_reduce_in_fp32=False, "
    "num_continuous_decode_steps=1, delete_ckpt_after_loading=False)"
)


def test_short_036_repr() -> None:
    args = parse_server_args(SHORT_036)
    assert args is not None
    assert args.form == "repr"
    assert args.truncated is False
    assert args.model_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert args.tp_size == 1
    assert args.dp_size == 1
    assert args.pp_size is None  # no such field in 0.3.6
    assert args.ep_size is None
    assert args.page_size is None
    assert args.mem_fraction_static == 0.88
    assert args.cuda_graph_max_bs == 160
    assert args.context_length is None
    assert args.speculative_algorithm is None
    assert args.enable_hierarchical_cache is None
    assert args.enable_metrics is False
    assert args.host == "127.0.0.1"
    assert args.api_key_set is False
    assert args.raw["api_key"] is None
    assert args.raw["torchao_config"] == ""
    assert args.raw["delete_ckpt_after_loading"] is False


# 0.5.19+: ``server_args={server_args.resolved_dict()}``; 0.5.23 redacts secrets.
DICT_0523 = (
    "server_args={'model_path': '/models/Kimi-K2.5', 'tokenizer_path': '/models/Kimi-K2.5', "
    "'load_format': 'auto', 'host': '0.0.0.0', 'port': 30000, 'dtype': 'bfloat16', "
    "'kv_cache_dtype': 'fp8_e4m3', 'mem_fraction_static': 0.835, "
    "'max_running_requests': 256, 'max_total_tokens': None, 'chunked_prefill_size': -1, "
    "'page_size': 64, 'tp_size': 16, 'dp_size': 2, 'pp_size': 1, 'moe_ep_size': 16, "
    "'attn_cp_size': 2, 'moe_dp_size': 4, 'enable_dp_attention': True, "
    "'context_length': 131072, 'cuda_graph_max_bs': 256, 'cuda_graph_bs': [1, 2, 4, 8], "
    "'speculative_algorithm': 'EAGLE', 'speculative_draft_model_path': None, "
    "'speculative_num_steps': 1, 'speculative_eagle_topk': 1, "
    "'speculative_num_draft_tokens': 2, 'enable_hierarchical_cache': True, "
    "'hicache_ratio': None, 'hicache_size': 120, 'hicache_mem_layout': 'page_first', "
    "'hicache_io_backend': 'direct', 'hicache_storage_backend': 'mooncake', "
    "'enable_metrics': True, 'base_gpu_id': 8, 'api_key': '<redacted>', "
    "'admin_api_key': '***', 'served_model_name': 'kimi', "
    "\"weird 'key'\": 'x: y, z}', 'json_model_override_args': '{\"a\": [1, 2]}'}"
)


def test_dict_form_0523() -> None:
    args = parse_server_args(DICT_0523)
    assert args is not None
    assert args.form == "dict"
    assert args.truncated is False
    assert args.model_path == "/models/Kimi-K2.5"
    assert args.mem_fraction_static == 0.835
    assert args.kv_cache_dtype == "fp8_e4m3"
    assert args.dtype == "bfloat16"
    assert args.tp_size == 16
    assert args.dp_size == 2
    assert args.ep_size == 16  # from moe_ep_size
    assert args.attn_cp_size == 2
    assert args.moe_dp_size == 4
    assert args.enable_dp_attention is True
    assert args.page_size == 64
    assert args.chunked_prefill_size == -1  # "disabled" is a valid value
    assert args.max_running_requests == 256
    assert args.max_total_tokens is None
    assert args.speculative_algorithm == "EAGLE"
    assert args.speculative_num_draft_tokens == 2
    assert args.hicache_ratio is None
    assert args.hicache_size == 120.0
    assert args.hicache_mem_layout == "page_first"
    assert args.hicache_io_backend == "direct"
    assert args.hicache_storage_backend == "mooncake"
    assert args.base_gpu_id == 8
    assert args.api_key_set is True
    assert args.raw["api_key"] == "<redacted>"
    assert args.raw["admin_api_key"] == "<redacted>"
    assert args.raw["weird 'key'"] == "x: y, z}"
    assert args.raw["json_model_override_args"] == '{"a": [1, 2]}'
    assert args.raw["cuda_graph_bs"] == [1, 2, 4, 8]


def test_ep_size_preferred_over_moe_ep_size() -> None:
    args = parse_server_args("server_args={'moe_ep_size': 4, 'ep_size': 2}")
    assert args is not None
    assert args.ep_size == 2
    args = parse_server_args("server_args={'ep_size': None, 'moe_ep_size': 4}")
    assert args is not None
    assert args.ep_size == 4


def test_dict_form_string_numbers_are_converted() -> None:
    args = parse_server_args(
        "server_args={'mem_fraction_static': '0.88', 'tp_size': '8', 'port': ' 30000 ', "
        "'hicache_ratio': '2.5', 'page_size': '16.0', 'enable_metrics': 'true', "
        "'enable_hierarchical_cache': 'False'}"
    )
    assert args is not None
    assert args.mem_fraction_static == 0.88
    assert args.tp_size == 8
    assert args.port == 30000
    assert args.hicache_ratio == 2.5
    assert args.page_size == 16
    assert args.enable_metrics is True
    assert args.enable_hierarchical_cache is False
    assert args.raw["mem_fraction_static"] == "0.88"  # raw keeps what was logged


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.88", 0.88),
        ("1", 1.0),
        ("1.0", 1.0),
        ("0", None),
        ("0.0", None),
        ("-0.5", None),
        ("1.5", None),
        ("'abc'", None),
        ("'0.7'", 0.7),
        ("True", None),
        ("None", None),
        ("nan", None),
        ("inf", None),
        ("[0.88]", None),
    ],
)
def test_mem_fraction_static_validation(value: str, expected: float | None) -> None:
    args = parse_server_args(f"server_args=ServerArgs(mem_fraction_static={value})")
    assert args is not None
    assert args.mem_fraction_static == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8", 8),
        ("8.0", 8),
        ("8.5", None),
        ("-8", None),
        ("0", None),
        ("True", None),
        ("False", None),
        ("'8'", 8),
        ("'eight'", None),
        ("None", None),
        ("inf", None),
        ("[8]", None),
        ("SomeObj(a=1)", None),
    ],
)
def test_int_field_validation(value: str, expected: int | None) -> None:
    args = parse_server_args(f"server_args=ServerArgs(tp_size={value}, page_size={value})")
    assert args is not None
    assert args.tp_size == expected
    assert args.page_size == expected
    assert type(args.tp_size) is type(expected)


def test_wrong_types_never_raise() -> None:
    args = parse_server_args(
        "server_args=ServerArgs(model_path=42, host=None, port=70000, base_gpu_id=-1, "
        "enable_metrics=1, enable_dp_attention='maybe', hicache_ratio=-2.0, hicache_size='big', "
        "kv_cache_dtype=['fp8'], speculative_num_steps=0, chunked_prefill_size=0, "
        "context_length=1e400, max_total_tokens=10**9, api_key='')"
    )
    assert args is not None
    assert args.model_path is None
    assert args.host is None
    assert args.port is None
    assert args.base_gpu_id is None
    assert args.enable_metrics is None  # an int is not a bool
    assert args.enable_dp_attention is None
    assert args.hicache_ratio is None
    assert args.hicache_size is None
    assert args.kv_cache_dtype is None
    assert args.speculative_num_steps is None
    assert args.chunked_prefill_size is None
    assert args.context_length is None  # 1e400 is inf
    assert args.max_total_tokens is None  # ``10**9`` is not a literal
    assert args.raw["max_total_tokens"] == "10**9"
    assert args.api_key_set is False
    assert args.raw["api_key"] == ""


def test_enum_and_path_reprs_unwrapped_for_string_fields() -> None:
    args = parse_server_args(
        "server_args=ServerArgs(model_path=PosixPath('/models/m'), "
        "kv_cache_dtype=<KVDtype.FP8: 'fp8_e5m2'>, "
        "speculative_algorithm=<SpeculativeAlgorithm.EAGLE3: 3>)"
    )
    assert args is not None
    assert args.model_path == "/models/m"
    assert args.kv_cache_dtype == "fp8_e5m2"
    assert args.speculative_algorithm == "EAGLE3"
    assert args.raw["kv_cache_dtype"] == "<KVDtype.FP8: 'fp8_e5m2'>"


def test_special_floats() -> None:
    args = parse_server_args("server_args=ServerArgs(a=inf, b=-inf, c=nan, hicache_ratio=inf)")
    assert args is not None
    assert args.raw["a"] == math.inf
    assert args.raw["b"] == -math.inf
    assert isinstance(args.raw["c"], float)
    assert math.isnan(args.raw["c"])
    assert args.hicache_ratio is None  # not JSON-safe, not a usable ratio


@pytest.mark.parametrize(
    "message",
    [
        "",
        "   ",
        "hello",
        "server_args",
        "server_args=",
        "server_args=None",
        "server_args=42",
        "server_args=[1, 2]",
        "port_args=PortArgs(tokenizer_ipc_name='x')",
        "Load weight begin. avail mem=93.10 GB",
        "xserver_args=ServerArgs(tp_size=8)",
    ],
)
def test_not_a_server_args_line(message: str) -> None:
    assert parse_server_args(message) is None


def test_not_a_string_returns_none() -> None:
    assert parse_server_args(None) is None  # type: ignore[arg-type]
    assert parse_server_args(b"server_args={}") is None  # type: ignore[arg-type]


def test_empty_bodies() -> None:
    args = parse_server_args("server_args=ServerArgs()")
    assert args is not None
    assert (args.form, args.truncated, dict(args.raw)) == ("repr", False, {})
    args = parse_server_args("server_args={}")
    assert args is not None
    assert (args.form, args.truncated, dict(args.raw)) == ("dict", False, {})
    assert args.tp_size is None
    assert args.api_key_set is False


def _completion_points(line: str, keys: list[str], separator: str) -> dict[str, int]:
    """For each key, the shortest prefix length after which its pair is known complete."""
    points = {}
    for key, following in itertools.pairwise(keys):
        points[key] = line.index(separator.format(following)) + 1  # just past the comma
    points[keys[-1]] = len(line)
    return points


TRUNC_REPR = (
    "server_args=ServerArgs(model_path='/m/a,b', tokenizer_path=\"it's\", "
    "load_format=<LoadFormat.AUTO: 'auto'>, cuda_graph_bs=[1, 2, (3, 4)], "
    "over={'k': ')', 'l': [']', '\\''], 'm': {}}, mem_fraction_static=0.88, tp_size=16, "
    "obj=SomeObj(a=1, b='x=y'), page_size=1, hicache_ratio=2.0, port=30000)"
)
TRUNC_DICT = (
    "server_args={'model_path': '/m/a,b', \"tokenizer_path\": \"it's\", "
    "'cuda_graph_bs': [1, 2, (3, 4)], 'over': {'k': '}', 'l': [']', '\\''], 'm': {}}, "
    "'mem_fraction_static': 0.88, 'tp_size': 16, 'page_size': 1, 'hicache_ratio': 2.0, "
    "'port': 30000}"
)


@pytest.mark.parametrize(
    ("line", "form", "separator"),
    [(TRUNC_REPR, "repr", ", {}="), (TRUNC_DICT, "dict", ", '{}'")],
)
def test_truncated_at_every_position(line: str, form: str, separator: str) -> None:
    full = parse_server_args(line)
    assert full is not None
    assert full.truncated is False
    keys = list(full.raw)
    dict_line = line.replace('"tokenizer_path"', "'tokenizer_path'")
    points = _completion_points(dict_line if form == "dict" else line, keys, separator)
    body_start = len("server_args=")
    previous_count = 0
    for cut in range(len(line) + 1):
        prefix = line[:cut]
        args = parse_server_args(prefix)
        if cut <= body_start:
            assert args is None, prefix
            continue
        assert args is not None, prefix
        assert args.form == form
        assert args.truncated is (cut < len(line)), prefix
        present = list(args.raw)
        assert present == [k for k in keys if points[k] <= cut], prefix
        assert len(present) >= previous_count
        previous_count = len(present)
        for key in present:
            assert args.raw[key] == full.raw[key], (prefix, key)
        if "tp_size" in present:
            assert args.tp_size == 16
        else:
            assert args.tp_size is None
        if "mem_fraction_static" in present:
            assert args.mem_fraction_static == 0.88
        else:
            assert args.mem_fraction_static is None
    assert full.tp_size == 16
    assert full.port == 30000


def test_truncated_inside_class_name() -> None:
    for cut in ("S", "Serv", "ServerArgs"):
        args = parse_server_args("server_args=" + cut)
        assert args is not None
        assert (args.form, args.truncated, dict(args.raw)) == ("repr", True, {})


def test_truncated_kimi_keeps_complete_pairs() -> None:
    cut = KIMI_058.index("tp_size=8") + len("tp_size=")  # value cut off: tp_size unknown
    args = parse_server_args(KIMI_058[:cut])
    assert args is not None
    assert args.truncated is True
    assert args.tp_size is None
    assert args.mem_fraction_static == 0.88
    assert args.page_size == 1
    assert args.model_path == "moonshotai/Kimi-K2.5"
    assert "device" in args.raw
    assert "tp_size" not in args.raw
    cut = KIMI_058.index("tp_size=8") + len("tp_size=8")  # "8" could be the start of "80"
    args = parse_server_args(KIMI_058[:cut])
    assert args is not None
    assert args.tp_size is None
    args = parse_server_args(KIMI_058[: cut + 1])  # the comma completes it
    assert args is not None
    assert args.tp_size == 8


def test_huge_line_completes() -> None:
    override = {f"layer_{i}": {"rope": [i, i + 0.5], "name": f"x,(y)]={i}"} for i in range(4000)}
    blob = json.dumps(override)
    assert len(blob) > 200_000
    line = (
        f"server_args=ServerArgs(model_path='/m', json_model_override_args={blob!r}, "
        f"nested={override!r}, tp_size=4, page_size=32)"
    )
    assert len(line) > 400_000
    args = parse_server_args(line)
    assert args is not None
    assert args.truncated is False
    assert args.tp_size == 4
    assert args.page_size == 32
    assert json.loads(str(args.raw["json_model_override_args"])) == override
    assert args.raw["nested"] == override
    half = parse_server_args(line[: line.index(", tp_size=4") - 5])
    assert half is not None
    assert half.truncated is True
    assert list(half.raw) == ["model_path", "json_model_override_args"]


@pytest.mark.parametrize(
    ("body", "tp_size"),
    [
        pytest.param("(" * 200_000, None, id="unclosed-parens"),
        pytest.param("[" * 100_000 + "]" * 100_000 + ")", None, id="deep-brackets-no-key"),
        pytest.param("x=" + "[" * 100_000 + "]" * 100_000 + ", tp_size=2)", 2, id="deep-list"),
        pytest.param("x=" + "-" * 100_000 + "1, tp_size=2)", 2, id="unary-chain"),
        pytest.param("x=[" + "a." * 100_000 + "b], tp_size=2)", 2, id="attribute-chain"),
        pytest.param("x=" + "+".join(["1"] * 50_000) + ", tp_size=2)", 2, id="binop-chain"),
        pytest.param("x=" + "1" * 100_000 + ", tp_size=2)", 2, id="huge-int"),
        pytest.param("x='" + "\\" * 100_001, None, id="backslashes-unterminated"),
        pytest.param("x='" + "\\'" * 100_000 + "', tp_size=2)", 2, id="escaped-quotes"),
        pytest.param(")]}" * 50_000 + "tp_size=2)", None, id="closers-first"),
        pytest.param("x=" + "<" * 100_000 + ", tp_size=2)", 2, id="angle-brackets"),
        pytest.param("x='\\d\\N\\x', tp_size=2)", 2, id="invalid-escapes"),
        pytest.param(",,,,=,=,=" * 20_000 + ")", None, id="separators-only"),
    ],
)
def test_pathological_inputs_do_not_raise(body: str, tp_size: int | None) -> None:
    args = parse_server_args("server_args=ServerArgs(" + body)
    assert args is not None
    assert args.form == "repr"
    assert args.tp_size == tp_size


def test_mismatched_closers_recover() -> None:
    args = parse_server_args("server_args=ServerArgs(a=[1, 2), tp_size=2)")
    assert args is not None
    # the stray ")" closes the ServerArgs( it matches: what follows is trailing text
    assert args.truncated is False
    assert args.raw["a"] == "[1, 2"
    args = parse_server_args("server_args=ServerArgs(a=1], tp_size=2)")
    assert args is not None
    assert args.raw["a"] == "1]"
    assert args.tp_size == 2


def test_server_args_from_mapping() -> None:
    server_info = {
        "model_path": "/models/x",
        "tp_size": 8,
        "dp_size": 1,
        "mem_fraction_static": 0.9,
        "page_size": 1,
        "enable_metrics": True,
        "api_key": "sk-topsecret",
        "admin_api_key": None,
        "ssl_keyfile_password": "hunter2",
        "hicache_size": 0,
        "port": 30000,
        "max_total_tokens": 8.0,
    }
    args = server_args_from_mapping(server_info)
    assert args.form == "dict"
    assert args.truncated is False
    assert args.model_path == "/models/x"
    assert args.tp_size == 8
    assert args.mem_fraction_static == 0.9
    assert args.enable_metrics is True
    assert args.max_total_tokens == 8
    assert args.api_key_set is True
    assert args.raw["api_key"] == "<redacted>"
    assert args.raw["admin_api_key"] is None
    assert args.raw["ssl_keyfile_password"] == "<redacted>"
    assert "topsecret" not in repr(args)
    assert server_info["api_key"] == "sk-topsecret"  # the caller's mapping is not modified
    assert server_args_from_mapping(server_info, form="json").form == "json"
    parsed = parse_server_args(f"server_args={server_info!r}")
    assert parsed is not None
    assert parsed.to_json() == args.to_json()
    assert parsed.raw == args.raw


class _LoadFormat(enum.Enum):
    AUTO = "auto"


@dataclasses.dataclass
class _FakeServerArgs:
    model_path: str
    chat_template: str
    load_format: _LoadFormat
    download_dir: PurePosixPath
    tp_size: int
    extra: dict[str, object]
    mem_fraction_static: float


def test_real_dataclass_repr_round_trip() -> None:
    # Let Python write the repr (quote choice and escaping exactly as SGLang's f"{x=}" would).
    tricky = "a'b\"c\\d, (e) = [f] }\t\n\u00e9\U0001f600"
    server_args = _FakeServerArgs(
        model_path=tricky,
        chat_template="it's",
        load_format=_LoadFormat.AUTO,
        download_dir=PurePosixPath("/x y"),
        tp_size=8,
        extra={"k": [tricky, ("t", None)], 3: {1.5: b"by\x00tes"}},
        mem_fraction_static=0.88,
    )
    args = parse_server_args(f"{server_args=}".replace("_FakeServerArgs", "ServerArgs"))
    assert args is not None
    assert args.model_path == make_visible(tricky)  # the filter for text from outside
    assert args.raw["chat_template"] == "it's"
    assert args.raw["load_format"] == "<_LoadFormat.AUTO: 'auto'>"
    assert args.raw["download_dir"] == "PurePosixPath('/x y')"
    assert args.raw["extra"] == visible_deep(server_args.extra)
    assert args.tp_size == 8
    assert args.mem_fraction_static == 0.88


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    prefix=st.sampled_from(
        ["", "server_args=", "server_args=ServerArgs(", "server_args={", " server_args = {'"]
    ),
    text=st.text(alphabet=st.sampled_from(list("'\"\\()[]{}<>,=: abcxyz01.-_\n"))) | st.text(),
)
def test_random_garbage_never_raises(prefix: str, text: str) -> None:
    args = parse_server_args(prefix + text)
    if args is not None:
        assert args.form in ("repr", "dict")
        assert all(isinstance(k, str) for k in args.raw)
        json.dumps(args.to_json(), allow_nan=False)


_SECRET_LIKE = ("api_key", "password", "secret", "hf_token")


@settings(max_examples=200, deadline=None)
@given(
    values=st.dictionaries(
        st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
                | st.tuples(inner, inner)
            ),
            max_leaves=8,
        ),
        max_size=8,
    ),
    cut=st.integers(min_value=0, max_value=10_000),
)
def test_random_values_round_trip(values: dict[str, object], cut: int) -> None:
    values = {k: v for k, v in values.items() if not any(s in k for s in _SECRET_LIKE)}
    pairs = ", ".join(f"{k}={v!r}" for k, v in values.items())
    for line, form in ((f"server_args={values!r}", "dict"), (f"server_args=X({pairs})", "repr")):
        args = parse_server_args(line)
        assert args is not None
        assert args.form == form
        assert args.truncated is False
        assert dict(args.raw) == visible_deep(values)
        partial = parse_server_args(line[: min(cut, len(line))])
        if partial is not None:
            assert list(partial.raw) == list(values)[: len(partial.raw)]
            for key, value in partial.raw.items():
                assert value == visible_deep(values[key])
