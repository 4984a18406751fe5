"""The measuring tools beside the library: the benchmark (`tools.benchmark`, run by `bench/dvc.yaml`),
the papers' GPU hours from measured seconds (`tools.gpu_hours`) and the reproduction check
(`tools.reproduction`). Each calls `pipeline` as a user would; nothing in `pipeline/` imports them."""
