"""SAEs: training runs and sweeps, SAE files, indexing into the store, feature statistics, core metrics."""
