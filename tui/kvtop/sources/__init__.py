"""Where kvtop's data comes from (log files, later NVML, journald, metrics); no SGLang knowledge."""
