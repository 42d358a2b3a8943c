"""The embedded `kvtop --demo` scenario: a replayed SGLang startup, then a simulated server."""
