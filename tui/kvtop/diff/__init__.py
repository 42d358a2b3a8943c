"""`kvtop diff`: two boots of a server side by side (tui/kvtop/model/boot_diff.py)."""
