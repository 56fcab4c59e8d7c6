"""drones tables (built in issue 3)."""
