"""The judgement: levels and thresholds, the alert rule, the server's state, freshness, notes."""
