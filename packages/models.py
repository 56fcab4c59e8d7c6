"""packages tables (built in issue 3)."""
