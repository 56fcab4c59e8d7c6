from django.core.management import call_command


def test_every_model_change_has_its_migration(db):
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # exits non-zero when one is missing


def test_customers_keep_their_tokens_across_the_move_to_a_token_table(transactional_db):
    """deliveries 0005: each customer's single token becomes its first CustomerToken, still working."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("deliveries", "0004_operator_permissions")], [("deliveries", "0005_customer_tokens")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old_apps = executor.loader.project_state(before).apps
    old_apps.get_model("deliveries", "Customer").objects.create(name="alice", token_hash="a" * 64)

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    token = executor.loader.project_state(after).apps.get_model("deliveries", "CustomerToken").objects.get()

    assert (token.customer.name, token.token_hash) == ("alice", "a" * 64)
    assert (token.revoked_at, token.expires_at) == (None, None)

    executor = MigrationExecutor(connection)
    executor.migrate(before)  # and back: the customer keeps its token
    customer = executor.loader.project_state(before).apps.get_model("deliveries", "Customer").objects.get()
    assert customer.token_hash == "a" * 64
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
