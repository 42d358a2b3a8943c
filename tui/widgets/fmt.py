"""The widgets' name for the shared number formats (they live in tui/fmt.py, with the report's)."""

from tui.fmt import UNKNOWN, count, gib, number, pct, ratio

__all__ = ["UNKNOWN", "count", "gib", "number", "pct", "ratio"]
