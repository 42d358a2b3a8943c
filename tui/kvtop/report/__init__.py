"""The one-shot report (--once): plain text and JSON renderings of a parsed startup."""
