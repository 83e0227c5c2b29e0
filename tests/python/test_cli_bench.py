"""gpusampler-cli bench sweeps and reports: --concurrency-range / --rate-range (one measurement
per point), --csv, stability windows, the server's queue/compute split from ServerTiming, and
JSON on stdout when the bench fails before it measures."""

from __future__ import annotations

import csv
import io
import json

from test_cli import run

SMALL = ("--rows", 1, "--n", 256, "--k", 16, "--labels-only", "-q")


def test_concurrency_range_csv_has_one_line_per_point(cli_bin, server):
    result = run(cli_bin, server, "bench", "--concurrency-range", "1:3:1", "--csv",
                 "--requests", 40, *SMALL)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [int(r["concurrency"]) for r in rows] == [1, 2, 3]
    for r in rows:
        assert int(r["requests"]) == 40 and int(r["ok"]) == 40 and int(r["errors"]) == 0
        assert float(r["throughput_rps"]) > 0
        p50, p99 = float(r["p50_ms"]), float(r["p99_ms"])
        assert 0 < p50 <= p99
        # The server's share of a request cannot exceed what the client waited.
        total = float(r["server_total_p50_ms"])
        assert 0 < total <= p99
        assert float(r["server_queue_p50_ms"]) >= 0 and float(r["server_compute_p50_ms"]) > 0


def test_rate_range_paces_each_point(cli_bin, server):
    result = run(cli_bin, server, "bench", "--rate-range", "20:40:20", "--duration", 1.0,
                 "--concurrency", 2, "--json", *SMALL)
    points = [json.loads(line) for line in result.stdout.splitlines()]
    assert [p["rate"] for p in points] == [20, 40]
    assert 15 <= points[0]["requests"] <= 21 and 30 <= points[1]["requests"] <= 41


def test_stability_repeats_windows_until_three_agree_or_the_limit(cli_bin, server):
    result = run(cli_bin, server, "bench", "--json", "--requests", 30, "--concurrency", 1,
                 "--stability-percent", 1000, *SMALL)
    report = json.loads(result.stdout)
    # Within 1000% always agrees: exactly three windows.
    assert report["windows"] == 3 and report["stable"] is True
    result = run(cli_bin, server, "bench", "--json", "--requests", 30, "--concurrency", 1,
                 "--stability-percent", 1e-9, "--max-windows", 4, *SMALL)
    report = json.loads(result.stdout)
    assert report["windows"] == 4 and report["stable"] is False


def test_json_on_a_failure_before_measuring(cli_bin, server):
    result = run(cli_bin, server, "bench", "--json", "--dataset", "no-such-dataset", check=False)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] == 0 and report["errors"] == {"NOT_FOUND": 1}
    assert "no-such-dataset" in report["error_messages"]["NOT_FOUND"]


def test_bad_ranges_are_usage_errors(cli_bin, server):
    for flag, value in (("--concurrency-range", "4:2"), ("--concurrency-range", "1:3:0"),
                        ("--concurrency-range", "0.5:2:0.5"), ("--rate-range", "a:b"),
                        ("--concurrency-range", "1")):
        result = run(cli_bin, server, "bench", flag, value, *SMALL, check=False)
        assert result.returncode == 2, (flag, value, result.stderr)
        assert flag in result.stderr, result.stderr
