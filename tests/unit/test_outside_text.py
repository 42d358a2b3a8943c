"""The one filter for text from outside (tui/kvtop/sglang/control_chars.py), where each string enters:
the log's server_args (after the repr is decoded), /server_info, the exporter's kvtop_info
labels (the host name included). Escapes, bidirectional overrides and zero-width characters are
shown visibly, never passed on."""

from __future__ import annotations

import re

import pytest

from kvtop.export.collector import info_labels
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.metrics import parse_server_info
from kvtop.sglang.server_args import parse_server_args

RAW = re.compile(
    r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b]52;c;aGk=\x07b", "a␛]52;c;aGk=␇b"),
        ("abc\u202edcba", "abc\\u202edcba"),  # RIGHT-TO-LEFT OVERRIDE
        ("ad\u200bmin", "ad\\u200bmin"),  # ZERO WIDTH SPACE
        ("\u2066x\u2069", "\\u2066x\\u2069"),  # isolates
        ("\ufeffbom", "\\ufeffbom"),
        ("line\u2028sep", "line\\u2028sep"),
        ("plain ünïcode 模型", "plain ünïcode 模型"),
    ],
)
def test_make_visible(text: str, shown: str) -> None:
    assert make_visible(text) == shown


def test_server_args_are_filtered_after_the_repr_is_decoded() -> None:
    # As SGLang's repr prints it: the escape is the four characters \x1b until decoded.
    line = (
        "server_args=ServerArgs(model_path='/m/kimi\\u202e', served_model_name='kimi\\x1b]52;c;"
        "aGk=\\x07', api_key='sk-secret', host='0.0.0.0', dist_init_addr='10.0.0.1\\x1b[2J')"
    )
    args = parse_server_args(line)
    assert args is not None
    assert args.served_model_name == "kimi␛]52;c;aGk=␇"
    assert args.model_path == "/m/kimi\\u202e"
    assert args.dist_init_addr == "10.0.0.1␛[2J"
    assert all(RAW.search(str(v)) is None for v in args.raw.values())
    assert args.raw["api_key"] == "<redacted>"


def test_server_info_strings_are_filtered() -> None:
    info = parse_server_info(
        {
            "served_model_name": "kimi\x1b]0;title\x07",
            "model_path": "/m\u202e",
            "version": "0.5\x1b[2J",
        }
    )
    assert info.server_args is not None
    assert info.server_args.served_model_name == "kimi␛]0;title␇"
    assert info.server_args.model_path == "/m\\u202e"
    assert info.version is None or RAW.search(info.version) is None


def test_the_exporters_info_labels_are_filtered() -> None:
    labels = info_labels(None, "node\x1b]52;c;aGk=\x07\u202e")
    assert labels["hostname"] == "node␛]52;c;aGk=␇\\u202e"
