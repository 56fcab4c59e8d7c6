"""What the outbox's migrations run on PostgreSQL only (a trigger, an index kind SQLite lacks).

Named with a leading underscore, so Django's migration loader does not take it for a migration."""


def on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run
