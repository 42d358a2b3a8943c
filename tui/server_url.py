"""Check `--url` before anything is fetched: http or https, a host, no credentials in it."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback", "url_problem"]

_EXAMPLE = "e.g. --url http://127.0.0.1:30000"


def url_problem(url: str) -> str | None:
    """None when ``url`` is usable as the server's base URL, else one sentence with a next step.

    The sentence never quotes the URL: a URL can carry a password, and messages end up in
    terminals, logs and bug reports.
    """
    if not url or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return (
            f"--url takes the server's address without spaces or control characters ({_EXAMPLE})."
        )
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced "[" in the host
        return f"--url is not a valid URL: give the server's address ({_EXAMPLE})."
    netloc = parts.netloc
    if "@" in netloc:
        return (
            "--url must not contain a user name or password: give the address alone and put "
            "the server's API key in a file for --api-key-file (or set SGLANG_API_KEY)."
        )
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not url.lower().startswith(f"{scheme}://"):
        return f"--url takes an http:// or https:// address of the SGLang server ({_EXAMPLE})."
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number from 0 to 65535
        return f"--url has an invalid port: give a number from 1 to 65535 ({_EXAMPLE})."
    if not host:
        return f"--url has no host name: give the server's host and port ({_EXAMPLE})."
    if port == 0:
        return f"--url has an invalid port: give a number from 1 to 65535 ({_EXAMPLE})."
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return (
            "--url takes the server's base address without ?query or #fragment: kvtop adds "
            f"/metrics and /server_info itself ({_EXAMPLE})."
        )
    return None


def is_loopback(url: str) -> bool:
    """True when the URL's host is a loopback address written out (127.0.0.0/8, ::1) or the
    name localhost (RFC 6761 reserves it for loopback). Any other name is not: what it resolves
    to is not kvtop's to trust."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    if host.rstrip(".") == "localhost":  # urlsplit lower-cases the host
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
