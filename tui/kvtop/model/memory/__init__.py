"""The memory picture: per rank from the log, per GPU reconciled with NVML, its processes."""
