"""Check `--url` before anything is fetched: http or https, a host, no credentials in it."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback", "url_fault", "url_problem"]

_EXAMPLE = "e.g. --url http://127.0.0.1:30000"


# What can be wrong with a base URL, in the order url_fault checks it.
SPACES, INVALID, CREDENTIALS, SCHEME, PORT, NO_HOST, PORT_ZERO, QUERY = (
    "spaces", "invalid", "credentials", "scheme", "port", "no host", "port 0", "query"
)  # fmt: skip


def url_fault(url: str) -> str | None:
    """None when ``url`` is usable as a base URL (http or https, a host, a port from 1 to 65535
    if any, no credentials, no query or fragment), else what is wrong with it (the constants
    above): the one rule for --url and --prometheus, each saying it in its own words."""
    if not url or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return SPACES
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced "[" in the host
        return INVALID
    if "@" in parts.netloc:
        return CREDENTIALS
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not url.lower().startswith(f"{scheme}://"):
        return SCHEME
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number from 0 to 65535
        return PORT
    if not host:
        return NO_HOST
    if port == 0:
        return PORT_ZERO
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return QUERY
    return None


def url_problem(url: str) -> str | None:
    """None when ``url`` is usable as the server's base URL, else one sentence with a next step.

    The sentence never quotes the URL: a URL can carry a password, and messages end up in
    terminals, logs and bug reports.
    """
    fault = url_fault(url)
    if fault is None:
        return None
    return {
        SPACES: (
            f"--url takes the server's address without spaces or control characters ({_EXAMPLE})."
        ),
        INVALID: f"--url is not a valid URL: give the server's address ({_EXAMPLE}).",
        CREDENTIALS: (
            "--url must not contain a user name or password: give the address alone and put "
            "the server's API key in a file for --api-key-file (or set SGLANG_API_KEY)."
        ),
        SCHEME: f"--url takes an http:// or https:// address of the SGLang server ({_EXAMPLE}).",
        PORT: f"--url has an invalid port: give a number from 1 to 65535 ({_EXAMPLE}).",
        NO_HOST: f"--url has no host name: give the server's host and port ({_EXAMPLE}).",
        PORT_ZERO: f"--url has an invalid port: give a number from 1 to 65535 ({_EXAMPLE}).",
        QUERY: (
            "--url takes the server's base address without ?query or #fragment: kvtop adds "
            f"/metrics and /server_info itself ({_EXAMPLE})."
        ),
    }[fault]


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
