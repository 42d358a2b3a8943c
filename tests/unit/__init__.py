"""Pure functions and in-process objects: no subprocess, no terminal, no server."""
