"""The live screens: Textual's Pilot, SVG snapshots (`__snapshots__/` beside their test file)
and real terminals in tmux."""
