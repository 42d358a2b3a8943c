"""How a GET from the server failed, as a few classes whose names, never their text, reach the
screen. Apart from tui/kvtop/sources/http_get.py so that catching them does not import httpx."""

from __future__ import annotations


class ConnectFailed(Exception):
    """Nothing answered at the address (refused, unreachable, name not found)."""


class FetchFailed(Exception):
    """The exchange broke (garbage, cut short, TLS, a redirect elsewhere); safe to show."""


class TimedOut(Exception):
    """httpx's own connect/read/write timeout fired before the caller's limit."""


class TooLarge(Exception):
    """The decoded body is larger than the limit."""
