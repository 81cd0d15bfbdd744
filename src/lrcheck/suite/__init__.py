"""lrcheck suite: many pairs from one TOML file, their expectations and baselines."""
