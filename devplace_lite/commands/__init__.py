"""CLI plugins: one module per extra `devplace` command (see devplace_lite.cli)."""
