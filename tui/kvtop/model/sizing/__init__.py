"""SGLang's KV-pool sizing: the formula, its replay on a parsed startup, hybrid pools, what-ifs."""
