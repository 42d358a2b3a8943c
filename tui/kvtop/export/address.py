"""ADDR of `kvtop --export [ADDR]`: where /metrics listens.

Accepted: `HOST:PORT` (an IPv4 address or a host name), `[IPV6]:PORT`, or `PORT` alone (on
127.0.0.1). Without ADDR: 127.0.0.1:9877. `:PORT` is refused: in Go exporters it means every
interface, and kvtop never opens itself to the network unasked (`0.0.0.0:PORT` or `[::]:PORT`
say so explicitly), and neither is an IPv4 address in shorthand (`0:PORT`, `0x0:PORT`, `127.1:PORT`)
nor `[0::0]:PORT` or `[::ffff:0.0.0.0]:PORT`: every such form is refused with the address in full.
An IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]:PORT`) is the IPv4 address it maps, listened
on and shown as such. A port is ASCII digits (str.isdigit and int take any script's digits).
Port 0 lets the system choose; kvtop prints the port it got.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 9877
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # one part of a host name (RFC 1123)
_HOST_NAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})*\.?")
_DIGITS = re.compile(r"[0-9]+")
_FORMS = "HOST:PORT, [IPV6]:PORT or PORT (e.g. 127.0.0.1:9877)"


class AddressError(ValueError):
    """ADDR cannot be used; the message is one sentence with the fix."""


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str  # as given (an IPv6 address without its brackets)
    port: int  # 0: the system chooses

    @property
    def ipv6(self) -> bool:
        return ":" in self.host

    def shown(self, port: int | None = None) -> str:
        """`127.0.0.1:9877`, `[::1]:9877` (with the port the server got, when given)."""
        host = f"[{self.host}]" if self.ipv6 else self.host
        return f"{host}:{self.port if port is None else port}"


def _port(text: str, addr: str) -> int:
    # ASCII digits, at most five once leading zeros are dropped: int() would read `²` or
    # Arabic-Indic digits, and refuses a string of over 4,300 digits with an exception.
    if not _DIGITS.fullmatch(text) or len(text.lstrip("0")) > 5 or int(text) > 65535:
        raise AddressError(
            f"--export {addr}: the port must be a number from 0 to 65535 in the digits 0-9 "
            f"(0: any free port); "
            f"give {_FORMS}."
        )
    return int(text)


def _shorthand(text: str, addr: str) -> None:
    """Refuse an IPv4 address not written in full (`0`, `0x0`, `00`, `0.0`, `127.1`): the C
    library reads each as an address, and `0:PORT` would listen on every interface while kvtop
    printed `http://0:PORT`."""
    try:
        packed = socket.inet_aton(text)
    except OSError:
        return  # a host name
    full = socket.inet_ntoa(packed)
    if full == text:
        return
    port = addr.rpartition(":")[2]
    if ipaddress.IPv4Address(full).is_unspecified:
        raise AddressError(
            f"--export {addr}: {text!r} means every interface, and kvtop does not listen on "
            f"every interface unasked; give 127.0.0.1:{port} (this host only) or "
            f"0.0.0.0:{port} (every interface)."
        )
    raise AddressError(f"--export {addr}: write the address in full, {full}:{port}.")


def _host(text: str, addr: str, bracketed: bool) -> str:
    if bracketed:
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            raise AddressError(
                f"--export {addr}: {text!r} in brackets is not an IPv6 address; give {_FORMS}."
            ) from None
        mapped = address.ipv4_mapped
        if mapped is not None:
            if mapped.is_unspecified:
                port = addr.rpartition(":")[2]
                raise AddressError(
                    f"--export {addr}: [{text}] means every IPv4 interface; write it "
                    f"0.0.0.0:{port} if that is meant, or give 127.0.0.1:{port} (this host only)."
                )
            return str(mapped)
        if address.is_unspecified and text != "::":
            port = addr.rpartition(":")[2]
            raise AddressError(
                f"--export {addr}: [{text}] means every interface; write it [::]:{port} if "
                f"that is meant, or give [::1]:{port} (this host only)."
            )
        return text
    if _HOST_NAME.fullmatch(text):
        _shorthand(text, addr)
        return text
    raise AddressError(
        f"--export {addr}: {text!r} is not an address or a host name; give {_FORMS}."
    )


def parse_address(addr: str | None) -> ListenAddress:
    """ADDR (None or empty: the default) as a host and port. Raises AddressError."""
    text = (addr or "").strip()
    if not text:
        return ListenAddress(DEFAULT_HOST, DEFAULT_PORT)
    if text.isdigit():  # any script's digits: _port says which it takes
        return ListenAddress(DEFAULT_HOST, _port(text, addr or ""))
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise AddressError(
                f"--export {text}: write an IPv6 address as [IPV6]:PORT, e.g. [::1]:9877."
            )
        number = _port(port, text)  # first: a refused host's message suggests this port
        return ListenAddress(_host(host, text, bracketed=True), number)
    if text.count(":") > 1:
        raise AddressError(
            f"--export {text}: write an IPv6 address in brackets with its port, e.g. [::1]:9877."
        )
    if text.startswith(":"):
        number = _port(text[1:], text)
        raise AddressError(
            f"--export {text}: kvtop does not listen on every interface unasked; give "
            f"127.0.0.1:{number} (this host only) or 0.0.0.0:{number} (every interface)."
        )
    host, sep, port = text.rpartition(":")
    if not sep:
        raise AddressError(f"--export {text}: no port; give {_FORMS}.")
    number = _port(port, text)
    return ListenAddress(_host(host, text, bracketed=False), number)
