"""The API key kvtop sends SGLang (Bearer): --api-key-file, else SGLANG_API_KEY. Its own module,
light: the live view reads it before its first frame (a bad key file is refused before the
screen opens), and tui/kvtop/sources/metrics.py sends it.
"""

from __future__ import annotations

from collections.abc import Mapping

# An API key file holds one short line; anything longer is the wrong file (or never ends).
MAX_KEY_FILE_CHARS = 4096


class ApiKeyError(Exception):
    """The API key file could not be read; the message names the path, never the content."""


def load_api_key(path: str | None, env: Mapping[str, str]) -> str | None:
    """The key from ``path`` (stripped) if given, else ``SGLANG_API_KEY`` from ``env``."""
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                key = handle.read(MAX_KEY_FILE_CHARS + 1)
            if len(key) > MAX_KEY_FILE_CHARS:  # /dev/zero, a log given by mistake
                raise ApiKeyError(
                    f"the API key file {path} holds more than {MAX_KEY_FILE_CHARS:,} characters: "
                    "an API key is one short line. Check the path."
                )
            key = key.strip()
        except FileNotFoundError:
            raise ApiKeyError(f"cannot read the API key file {path}: no such file.") from None
        except PermissionError:
            raise ApiKeyError(
                f"cannot read the API key file {path}: permission denied. "
                "Make it readable by the user running kvtop."
            ) from None
        except (OSError, UnicodeDecodeError):
            raise ApiKeyError(
                f"cannot read the API key file {path}: it is not a readable text file."
            ) from None
        if not key:
            raise ApiKeyError(f"the API key file {path} is empty: put the key in it.")
        if not _header_safe(key):
            raise ApiKeyError(
                f"the API key file {path} holds characters an HTTP header cannot carry "
                "(non-ASCII, spaces or control characters): check the file."
            )
        return key
    key = env.get("SGLANG_API_KEY", "").strip()
    if key and not _header_safe(key):
        raise ApiKeyError(
            "SGLANG_API_KEY holds characters an HTTP header cannot carry (non-ASCII, spaces or "
            "control characters): check its value."
        )
    return key or None


def _header_safe(key: str) -> bool:
    """Printable ASCII without spaces: what a Bearer token in a header can be."""
    return all(0x21 <= ord(ch) <= 0x7E for ch in key)
