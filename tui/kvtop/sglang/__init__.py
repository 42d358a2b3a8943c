"""Everything kvtop knows about SGLang: log line formats, server arguments, the startup story."""
