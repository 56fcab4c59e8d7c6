"""deliveries tables (built in issue 3)."""
