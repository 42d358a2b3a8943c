"""kvtop's Textual stylesheets, installed as the kvtop.styles package (see pyproject.toml)."""
