"""The benchmark harness at a tiny size: it runs, prints its table and writes its JSON (no timing asserted)."""

import json
import os
import re
import subprocess

import pytest

from tests.processes import MANAGE

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]

MESSAGE_BY_KIND = ("message_workers", "message_database", "message_broker")
CPU_BY_KIND = ("cpu_web", "cpu_relay", "cpu_workers", "cpu_postgresql", "cpu_rabbitmq", "cpu_bench")


def test_bench_measures_every_figure_beside_its_reference_and_writes_json(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "delivery_project.settings"}
    command = [*MANAGE, "bench", "--events", "100", "--runs", "1", "--relays", "1", "--results-dir", str(tmp_path)]
    command += ["--latency-rates", "20", "--latency-seconds", "2", "--history", "300"]
    command += ["--api-clients", "2", "--api-seconds", "2", "--deliveries", "5", "--drones", "5"]
    command += ["--embedded-deliveries", "2", "--sweep-seconds", "5", "--handler-deliveries", "2"]
    command += ["--worker-messages", "30", "--webhook-messages", "20"]
    # A bound on a hang, not a timing: beside a CPU-bound step it took 238 s here, 72 s alone.
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)

    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\d+\.\d\d x raw_pipelined", run.stdout)  # each relay figure beside its reference
    [written] = tmp_path.glob("bench-*.json")
    result = json.loads(written.read_text())
    assert set(result["figures"]) == {
        "raw_pipelined",
        "dramatiq_enqueue",
        "relay_1",
        "statements_request",
        "statements_delivery",
        "healthz_in_process",
        "handler_cpu_python",
        "handler_cpu_database",
        "handler_cpu_total",
        "webhook_delivery_cpu",
        "webhook_sends",
        "webhook_posts_bare",
        "message_in_process",
        "message_in_process_python",
        "message_in_process_database",
        "message_through_workers",
        *MESSAGE_BY_KIND,
        "publish",
        "publish_bare",
        "sweep",
        *(f"{to}_p{q}_at_20" for to in ("handler", "confirmed") for q in (50, 99)),
        "claim_empty",
        "claim_history",
        "handler_empty",
        "handler_history",
        "prune",
        "api_floor",
        "healthz_cpu",
        "api_accepted",
        "api_p50",
        "api_p99",
        "commit_ceiling",
        "end_to_end",
        "handler_runs",
        "copies_per_pack",
        "transactions",
        "cpu_per_delivery",
        *CPU_BY_KIND,
        "worker_rss_growth",
        "sweep_lag",
        "embedded_hop_p50",
        "embedded_hop_p99",
    }
    # CPU by kind of process adds up to the whole; a kind idle for a second may read 0 (10-ms ticks).
    by_kind = [result["figures"].pop(kind)["median"] for kind in CPU_BY_KIND]
    assert min(by_kind) >= 0 and sum(by_kind) == pytest.approx(result["figures"]["cpu_per_delivery"]["median"])
    by_kind = [result["figures"].pop(kind)["median"] for kind in MESSAGE_BY_KIND]  # one run: medians add up
    assert min(by_kind) >= 0 and sum(by_kind) == pytest.approx(result["figures"]["message_through_workers"]["median"])
    here = [result["figures"].pop(f"message_in_process_{side}")["median"] for side in ("python", "database")]
    assert min(here) > 0 and sum(here) == pytest.approx(result["figures"]["message_in_process"]["median"])
    assert result["figures"]["message_through_workers"]["reference"] == "message_in_process"
    assert result["figures"]["publish"]["reference"] == "publish_bare"
    assert result["figures"]["api_accepted"]["reference"] == "api_floor"
    assert result["figures"]["cpu_per_delivery"]["reference"] == "healthz_cpu"  # judged in /healthz units
    assert result["figures"]["end_to_end"]["reference"] == "commit_ceiling"
    assert result["figures"]["copies_per_pack"]["median"] >= 1  # every delivery's copies were relayed
    assert result["figures"]["transactions"]["median"] >= 1  # the accepted POST's own, at least
    assert len(result["statements_per_handler"]) == 14  # every (subscriber, event) of the happy path
    assert result["handler_cpu_ms"].keys() == result["statements_per_handler"].keys()  # each one timed
    assert all(python > 0 and database > 0 for python, database in result["handler_cpu_ms"].values())
    assert result["figures"]["handler_cpu_python"]["reference"] == "healthz_in_process"
    webhook_cpu = result["figures"].pop("webhook_delivery_cpu")  # a difference: noise may make it negative here
    assert webhook_cpu["reference"] == "handler_cpu_total" and float(webhook_cpu["note"].split(" webhook")[0]) >= 1
    assert result["figures"]["webhook_sends"]["reference"] == "webhook_posts_bare"
    assert sum(result["statements_per_handler"].values()) <= result["figures"]["statements_delivery"]["median"]
    growth = result["figures"].pop("worker_rss_growth")  # may be 0 or less
    assert result["figures"].pop("sweep_lag")["min"] >= 0  # 0 when it is never behind (the test's 1-s figure)
    assert result["figures"]["sweep"]["reference"] == "relay_1"
    assert growth["min"] <= growth["median"] <= growth["max"] and "handler runs" in growth["note"]
    assert all(f["median"] > 0 and f["min"] <= f["median"] <= f["max"] for f in result["figures"].values())
    assert result["figures"]["relay_1"]["reference"] == "raw_pipelined"
    assert result["figures"]["claim_history"]["reference"] == "claim_empty"
    deleted = int(result["figures"]["prune"]["note"].split(" rows deleted")[0].replace(",", ""))
    assert deleted >= 600  # at least the history it wrote, outbox and inbox
    assert result["machine"]["cpus"] and result["machine"]["postgresql"]
