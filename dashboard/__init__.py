"""The sgdsim Dash app (reads the DuckDB store read-only)."""
