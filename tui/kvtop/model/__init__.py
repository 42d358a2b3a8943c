"""Pure arithmetic of the memory picture: SGLang's KV sizing formula and model dimensions."""
