"""The fleet (`kvtop --prometheus`): many hosts read back from Prometheus, one wing of its own.

Inside the wing the same one-way streets as the single host: the Prometheus API client and the
reader (I/O, no terminal), the pure fleet model, join, alerts, rows and summaries, the reports
(Rich, no Textual), the feed, and the Textual app with its screen and table.
"""
