"""kvtop's Textual stylesheets, installed as the tui.styles package (see pyproject.toml)."""
