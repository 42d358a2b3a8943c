"""`kvtop --prometheus URL` on the command line (tui/kvtop/fleet/cli.py): usage errors exit 2 with
argparse's usage line and a sentence, as every other flag of tui/kvtop/cli.py; nothing is read before
the options are known to be right. Reading Prometheus itself is the reader's, tested against
a real Prometheus and end to end."""

from __future__ import annotations

import pytest

from kvtop.cli import main
from kvtop.option_rules import prometheus_url_problem

URL = "http://127.0.0.1:9"  # nothing is ever sent: every case below stops before reading


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--selector", 'job="x"', "--once"], "--selector goes with --prometheus URL"),
        (["--prometheus-bearer-file", "/x", "--once"], "--prometheus-bearer-file goes with"),
        (["--prometheus", URL, "--once", "--unit", "sglang"], "--unit read one host"),
        (["--prometheus", URL, "--once", "--log-file", "x.log"], "--log-file read one host"),
        (["--prometheus", URL, "--once", "--demo"], "--demo read one host"),
        (["--prometheus", URL, "--once", "--export"], "give one or the other"),
        (["--prometheus", URL, "--json"], "--json goes with --once"),
        (["--prometheus", URL, "--once", "--json", "--width", "90"], "--width goes with --once"),
        (["--prometheus", URL, "--once", "--interval", "0"], "--interval takes seconds"),
        (["--prometheus", "prom:9090", "--once"], "http:// or https://"),
        (["--prometheus", "http://prom:9090/?q=1", "--once"], "without ?query"),
        (["--prometheus", URL, "--once", "--selector", "  "], "PromQL label matchers"),
        (["--prometheus", URL], "the live view needs a terminal"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kvtop")
    assert says in err and "Traceback" not in err


def test_a_password_in_the_url_is_refused_without_being_quoted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--prometheus", "https://me:s3cret@prom:9090", "--once"]) == 2
    err = capsys.readouterr().err
    assert "--prometheus-bearer-file" in err and "s3cret" not in err


def test_urls_prometheus_can_be_behind() -> None:
    for url in ("http://prom:9090", "https://prom.example/prometheus", "http://[::1]:9090/"):
        assert prometheus_url_problem(url) is None, url
    for url in ("", "http://", "http://prom:0", "http://prom:99999", "file:///x"):
        assert prometheus_url_problem(url) is not None, url


def test_an_unreadable_bearer_file_exits_1(tmp_path, capsys) -> None:
    """Missing, empty or a directory: one sentence naming the problem, exit 1 (like other
    unreadable input), and nothing is sent (the check happens before any request)."""
    empty = tmp_path / "token"
    empty.write_text("")
    for path in (tmp_path / "missing", empty, tmp_path):
        code = main(["--prometheus", URL, "--once", "--prometheus-bearer-file", str(path)])
        assert code == 1
        err = capsys.readouterr().err
        assert err.startswith("kvtop: ")
        assert "Traceback" not in err
