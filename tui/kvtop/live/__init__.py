"""The live view: kvtop's Textual app, its screens and widgets, on any SnapshotFeed.

It knows neither the session nor the sources: the app draws the Snapshots a feed hands it.
The fleet's app shares its base (stylesheet, quiet driver, leaving on SIGHUP/SIGTERM).
"""
