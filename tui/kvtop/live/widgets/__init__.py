"""Textual widgets: each formats one part of a Snapshot and refreshes only when its part changed."""
