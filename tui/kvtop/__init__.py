"""kvtop: live per-GPU memory and KV-cache diagnostics for SGLang servers."""

__version__ = "0.1.0"
