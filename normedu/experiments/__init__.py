"""Scale experiments, one module per experiment; each picks its size with normedu.device.choose."""
