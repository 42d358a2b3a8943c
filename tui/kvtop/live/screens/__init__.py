"""Textual screens: the overview, one GPU's detail, the formula modal and the help."""
