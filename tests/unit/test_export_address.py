"""ADDR of `kvtop --export [ADDR]` (tui/kvtop/export/address.py): what is accepted, and the one
sentence for what is not (the command line turns it into exit 2)."""

from __future__ import annotations

import ipaddress

import pytest

from kvtop.export.address import AddressError, ListenAddress, parse_address


@pytest.mark.parametrize(
    ("addr", "host", "port", "shown"),
    [
        (None, "127.0.0.1", 9877, "127.0.0.1:9877"),
        ("", "127.0.0.1", 9877, "127.0.0.1:9877"),
        ("9100", "127.0.0.1", 9100, "127.0.0.1:9100"),
        ("0", "127.0.0.1", 0, "127.0.0.1:0"),
        ("127.0.0.1:9877", "127.0.0.1", 9877, "127.0.0.1:9877"),
        ("0.0.0.0:9877", "0.0.0.0", 9877, "0.0.0.0:9877"),  # every interface, said explicitly
        ("10.1.2.3:9877", "10.1.2.3", 9877, "10.1.2.3:9877"),
        ("localhost:9877", "localhost", 9877, "localhost:9877"),
        ("gpu-node-01.example.com:9877", "gpu-node-01.example.com", 9877, None),
        ("[::1]:9877", "::1", 9877, "[::1]:9877"),
        ("[::]:9877", "::", 9877, "[::]:9877"),
        ("[fe80::1%eth0]:9877", "fe80::1%eth0", 9877, "[fe80::1%eth0]:9877"),
        (" 127.0.0.1:65535 ", "127.0.0.1", 65535, "127.0.0.1:65535"),
        ("127.0.0.1:009877", "127.0.0.1", 9877, "127.0.0.1:9877"),
        # An IPv4-mapped IPv6 address is the IPv4 address it maps: listened on and shown as such.
        ("[::ffff:127.0.0.1]:9877", "127.0.0.1", 9877, "127.0.0.1:9877"),
        ("[::FFFF:7f00:1]:9877", "127.0.0.1", 9877, "127.0.0.1:9877"),
        ("[::ffff:10.1.2.3]:9877", "10.1.2.3", 9877, "10.1.2.3:9877"),
    ],
)
def test_accepted(addr: str | None, host: str, port: int, shown: str | None) -> None:
    parsed = parse_address(addr)
    assert parsed == ListenAddress(host, port)
    if shown is not None:
        assert parsed.shown() == shown


def test_the_default_is_loopback() -> None:
    assert parse_address(None).shown() == "127.0.0.1:9877"


def test_shown_with_the_port_the_system_chose() -> None:
    assert parse_address("[::1]:0").shown(40123) == "[::1]:40123"
    assert parse_address("0").shown(40123) == "127.0.0.1:40123"


@pytest.mark.parametrize(
    ("addr", "words"),
    [
        (":9877", "give 127.0.0.1:9877 (this host only) or 0.0.0.0:9877 (every interface)"),
        # Every all-interfaces shorthand is refused like :PORT (the C library reads each as
        # 0.0.0.0); other shorthand is written out in full.
        ("0:9877", "'0' means every interface"),
        ("0x0:9877", "'0x0' means every interface"),
        ("00:9877", "'00' means every interface"),
        ("0.0:9877", "'0.0' means every interface"),
        ("[0::0]:9877", "[0::0] means every interface; write it [::]:9877"),
        ("127.1:9877", "write the address in full, 127.0.0.1:9877"),
        (":x", "the port must be a number from 0 to 65535"),
        ("65536", "the port must be a number from 0 to 65535"),
        ("127.0.0.1:", "the port must be a number"),
        ("127.0.0.1:-1", "the port must be a number"),
        ("127.0.0.1:http", "the port must be a number"),
        ("127.0.0.1", "no port"),
        ("::1", "write an IPv6 address in brackets"),
        ("fe80::1:9877", "write an IPv6 address in brackets"),
        ("[::1]", "write an IPv6 address as [IPV6]:PORT"),
        ("[::1]9877", "write an IPv6 address as [IPV6]:PORT"),
        ("[127.0.0.1]:9877", "'127.0.0.1' in brackets is not an IPv6 address"),
        ("a b:9877", "'a b' is not an address or a host name"),
        ("-host:9877", "'-host' is not an address or a host name"),
        (":", "the port must be a number"),
        # Every IPv4-mapped form of 0.0.0.0 is refused like the other every-interface
        # shorthand: only 0.0.0.0 and [::] written out open the exporter to the network.
        (
            "[::ffff:0.0.0.0]:9877",
            "[::ffff:0.0.0.0] means every IPv4 interface; write it 0.0.0.0:9877",
        ),
        ("[::ffff:0:0]:9877", "[::ffff:0:0] means every IPv4 interface; write it 0.0.0.0:9877"),
        ("[0:0:0:0:0:ffff:0.0.0.0]:9877", "means every IPv4 interface"),
        # A port is ASCII digits: str.isdigit and int also take other scripts' digits.
        ("127.0.0.1:\u00b2", "the port must be a number from 0 to 65535 in the digits 0-9"),
        ("127.0.0.1:\u0669\u0668\u0667\u0669", "a number from 0 to 65535 in the digits 0-9"),
        ("\u0669\u0668\u0667\u0669", "the port must be a number from 0 to 65535 in the digits 0-9"),
        ("\uff19\uff18\uff17\uff17", "the port must be a number from 0 to 65535 in the digits 0-9"),
        ("[::1]:\u0669", "the port must be a number from 0 to 65535 in the digits 0-9"),
        pytest.param(
            "127.0.0.1:" + "9" * 5000, "the port must be a number from 0 to 65535", id="5000-digits"
        ),
        ("127.0.0.1:+9877", "the port must be a number"),
        ("127.0.0.1:9_877", "the port must be a number"),
        ("127.0.0.1: 9877", "the port must be a number"),
        ("localhost\n:9877", "is not an address or a host name"),
    ],
)
def test_refused_with_a_next_step(addr: str, words: str) -> None:
    with pytest.raises(AddressError) as refused:
        parse_address(addr)
    message = str(refused.value)
    assert message.startswith(f"--export {addr.strip()}: ") and message.endswith(".")
    assert words in message


def test_a_mapped_every_interface_address_names_both_choices() -> None:
    with pytest.raises(AddressError) as refused:
        parse_address("[::ffff:0.0.0.0]:9100")
    assert str(refused.value) == (
        "--export [::ffff:0.0.0.0]:9100: [::ffff:0.0.0.0] means every IPv4 interface; write it "
        "0.0.0.0:9100 if that is meant, or give 127.0.0.1:9100 (this host only)."
    )


def test_a_mapped_loopback_address_is_loopback() -> None:
    parsed = parse_address("[::ffff:127.0.0.1]:0")
    assert not parsed.ipv6 and ipaddress.ip_address(parsed.host).is_loopback
