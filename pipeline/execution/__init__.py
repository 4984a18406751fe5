"""Where and how a stage runs: the device, seed, threads and precision (`runtime`), the record of the
machine and software a result was made with (`environment`), a stage across a machine's GPUs
(`launch`) and the one GPU each stage process holds (`lease`)."""
