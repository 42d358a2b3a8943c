"""`kvtop --export [ADDR]`: the session's latest Snapshot as Prometheus metrics (docs/exporter.md).

`address.py` reads ADDR, `collector.py` renders a Snapshot into the families of
tui/kvtop/export/families.py, `server.py` runs the session headless and serves /metrics,
`command.py` is the command line's one entry (serve, or `--once` for one body on stdout).
No Textual or Rich here: the exporter is a small resident process.
"""
