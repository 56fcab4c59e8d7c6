"""Django's PostgreSQL backend, with a pool that answers at once while the database is unreachable (see base)."""
