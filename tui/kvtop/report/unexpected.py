"""What every command says when kvtop itself fails (a bug, not bad input): one sentence with a
next step instead of a traceback; KVTOP_DEBUG=1 lets the traceback through."""

from __future__ import annotations

import os


def debugging() -> bool:
    """KVTOP_DEBUG is set: let the exception (and its traceback) through."""
    return bool(os.environ.get("KVTOP_DEBUG"))


def unexpected_error(exc: BaseException) -> str:
    """The sentence, for stderr (after "kvtop: ") or a --check line."""
    return (
        f"kvtop stopped on an unexpected error ({type(exc).__name__}). Please report it with "
        "the command you ran; KVTOP_DEBUG=1 shows the traceback."
    )
