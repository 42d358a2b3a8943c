"""The process table: every GPU process, whose it is, its order, its columns for a width."""
