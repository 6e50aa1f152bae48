"""SQL shipped with sgdsim: schema.sql (tables) and views.sql (analysis views)."""
