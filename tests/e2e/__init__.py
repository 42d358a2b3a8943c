"""Real Prometheus, real systemd-journald and journal-remote, several processes together."""
