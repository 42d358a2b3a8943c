"""kvtop's tests, by level: unit/, process/, tui/ and e2e/; their helpers in support/.

A package so that every level imports its helpers by one name (`tests.support.…`) from the
repository root, as bench/ and scripts/ do too.
"""
