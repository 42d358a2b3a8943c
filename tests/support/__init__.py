"""What the tests share, and bench/ and scripts/ reuse: fake servers, fake GPUs (fake_nvml/),
stills, fleets, journals and terminals. Imported as `tests.support.<module>` from the
repository root."""
