"""The analyzer's command line: report shapes (--json), text output, defaults from settings, exit codes on bad input."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logtools.cli import main

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "logs"
FAILED = FIXTURES / "vllm_0.32_failed_start.log"
OLD = FIXTURES / "vllm_0.4_old_format.log"
REQUESTS = FIXTURES / "requests_mixed.jsonl"

GROUP_KEYS = {"level", "count", "source", "process", "message", "exception", "first_seen", "last_seen", "traceback"}
GROUP_KEYS |= {"last_seen_from_line_before"}
SOURCE_KEYS = {"files", "bytes_read", "overlong_lines", "partial_lines_skipped", "shrunk_files", "problems"}
SOURCE_KEYS |= {"skipped_older_than_since"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def settings_logs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """LOGS_DIR pointed at an empty folder, read through a fresh settings object."""
    from core.settings import get_settings

    monkeypatch.setenv("LOGS_DIR", str(tmp_path))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_errors_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """--errors --json: window, source facts, counts by level and groups with example traceback."""
    report = run_json(capsys, "--errors", "--log", str(FAILED), "--no-rotated")["errors"]
    assert set(report) == {"since", "log", "events", "by_level", "groups_total", "groups"}
    assert set(report["log"]) == SOURCE_KEYS and report["log"]["files"] == [str(FAILED)]
    assert report["by_level"] == {"ERROR": 3, "WARNING": 2} and report["events"] == 5
    assert all(set(group) == GROUP_KEYS for group in report["groups"])
    first = report["groups"][0]
    assert first["level"] == "ERROR" and first["traceback"][0] == "Traceback (most recent call last):"
    assert first["first_seen"][10:19] == "T23:10:41"  # local ISO 8601 with offset


def test_slow_json_shape_and_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    """--slow --json lists finished requests over --threshold-ms, slowest first, with their recorded fields; the
    timed-out and failed ones are counted apart by cause, not ranked."""
    report = run_json(capsys, "--slow", "--threshold-ms", "1000", "--requests", str(REQUESTS))["slow"]
    assert set(report) == {"since", "requests_log", "threshold_ms", "requests", "finished", "slow", "not_finished",
                           "not_finished_by_cause", "slowest"}  # fmt: skip
    assert report["requests_log"]["bad_lines"] == 9 and (report["requests"], report["finished"]) == (6, 4)
    assert report["slow"] == 2 and [r["request_id"] for r in report["slowest"]] == ["lt-2", "lt-1"]
    assert report["not_finished"] == 2
    assert report["not_finished_by_cause"] == {"timeout": 1, "vLLM is not reachable": 1}
    assert set(report["slowest"][0]) == {
        "ts", "source", "request_id", "model", "prompt_tokens", "completion_tokens", "ttft_ms", "total_ms", "status",
        "error",
    }  # fmt: skip


def test_stats_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """--stats --json: requests (rate, percentiles, tokens/s), engine figures and log health in one object."""
    report = run_json(capsys, "--stats", "--log", str(OLD), "--requests", str(REQUESTS))["stats"]
    assert set(report) == {"since", "requests", "requests_missing", "engine", "log", "log_missing"}
    requests = report["requests"]
    assert requests["requests"] == 6 and requests["error_rate"] == pytest.approx(0.3333, abs=1e-4)
    assert set(requests["total_ms"]) == {"p50", "p90", "p95", "p99", "mean", "max", "percentile_error_pct"}
    assert requests["total_ms"]["percentile_error_pct"] == 0.5
    assert requests["completion_tokens_per_s"] > 0
    engine = report["engine"]
    assert engine["samples"] == 2 and engine["generation_tokens_per_s"]["max"] == 25.3
    log = report["log"]
    assert log["http"] == {"inference_requests": 3, "status_4xx": 1, "status_5xx": 1}
    assert log["warnings_and_errors"]["by_level"] == {"ERROR": 2, "WARNING": 1}


def test_several_reports_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    """--errors --slow --stats together give all three keys."""
    reports = run_json(capsys, "--errors", "--slow", "--stats", "--log", str(OLD), "--requests", str(REQUESTS))
    assert set(reports) == {"errors", "slow", "stats"}


def test_text_output_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    """Text mode shows counts, levels, sources, the exception line and the request percentiles."""
    code, out, _ = run(capsys, "--errors", "--stats", "--log", str(FAILED), "--requests", str(REQUESTS))
    assert code == 0
    assert "5 events in 5 groups (ERROR 3, WARNING 2)" in out
    assert "core.py:866" in out and "-> ValueError: To serve at least one request" in out
    assert "error rate 33.33%" in out and "total_ms  p50" in out
    code, out, _ = run(capsys, "--errors", "--tracebacks", "--log", str(FAILED))
    assert "      | Traceback (most recent call last):" in out


def test_slow_text_says_when_limit_cut_the_list_and_labels_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """--slow --limit 2 of 3 slow requests: the headline says how many are shown, a closing line how many more and
    which flag shows them; the token column says it is prompt/completion tokens."""
    code, out, _ = run(capsys, "--slow", "--threshold-ms", "800", "--limit", "2", "--requests", str(REQUESTS))
    assert code == 0
    lines = out.splitlines()
    assert "3 of 4 finished" in lines[0] and lines[0].endswith("; the slowest 2 shown"), lines[0]
    assert "IN/OUT TOK" in lines[2] and "prompt tokens / completion tokens" in out
    assert "  ... 1 more slow requests (--limit N shows more)" in lines
    code, out, _ = run(capsys, "--slow", "--threshold-ms", "800", "--requests", str(REQUESTS))
    assert "shown" not in out.splitlines()[0] and "more slow requests" not in out


def test_slow_ranks_only_finished_requests_and_counts_the_rest_by_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose 120 rows all timed out or were cancelled: --slow lists no "slow request" (once `120 of 120`) and
    says how many were left out, by cause; a finished request is still ranked beside them."""
    rows = [{"ts": "2026-11-29T22:03:19+00:00", "source": "loadtest", "request_id": f"t{i}", "total_ms": 300000.0,
             "status": "error", "error": "timeout: no chunk within 300 s"} for i in range(100)]  # fmt: skip
    rows += [{"ts": "2026-11-29T22:03:19+00:00", "source": "loadtest", "request_id": f"c{i}", "total_ms": 90000.0,
              "status": "cancelled", "error": "incomplete: cancelled by the end of the run"} for i in range(20)]  # fmt: skip
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    code, out, _ = run(capsys, "--slow", "--requests", str(path), "--no-rotated")
    lines = out.splitlines()
    assert code == 0 and lines[0].endswith(": 0 of 0 finished"), lines[0]
    assert lines[1].startswith("  Left out: 120 request(s) that did not finish (timeout 100, cancelled 20)")
    assert len(lines) == 2  # no table: nothing finished
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"ts": "2026-11-29T22:04:00+00:00", "source": "ui", "request_id": "done",
                             "total_ms": 4000.0, "status": "ok"}) + "\n")  # fmt: skip
    report = run_json(capsys, "--slow", "--requests", str(path), "--no-rotated")["slow"]
    assert [r["request_id"] for r in report["slowest"]] == ["done"] and report["not_finished"] == 120


def test_rotated_and_gzip_files_via_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--log vllm.log also reads vllm.log.1 and vllm.log.2.gz; --no-rotated reads only vllm.log."""
    (tmp_path / "vllm.log.2.gz").write_bytes(gzip.compress(b"ERROR 11-27 10:00:00 a.py:1] rotated and zipped\n"))
    (tmp_path / "vllm.log.1").write_bytes(b"WARNING 11-28 10:00:00 a.py:2] rotated\n")
    (tmp_path / "vllm.log").write_bytes(b"(APIServer pid=1) ERROR 11-29 10:00:00 [a.py:3] current\n")
    everything = run_json(capsys, "--errors", "--log", str(tmp_path / "vllm.log"))["errors"]
    assert everything["events"] == 3 and len(everything["log"]["files"]) == 3
    current = run_json(capsys, "--errors", "--no-rotated", "--log", str(tmp_path / "vllm.log"))["errors"]
    assert [g["message"] for g in current["groups"]] == ["current"]


def test_since_limits_the_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--since 30m keeps the recent error and drops the one from two hours ago."""
    log = tmp_path / "vllm.log"
    old = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - 7200))
    new = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - 60))
    log.write_text(f"ERROR {old} a.py:1] two hours ago\nERROR {new} a.py:1] a minute ago\n")
    report = run_json(capsys, "--errors", "--since", "30m", "--log", str(log))["errors"]
    assert [g["message"] for g in report["groups"]] == ["a minute ago"] and report["since"] is not None


def test_defaults_come_from_settings_logs_dir(settings_logs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --log/--requests the files are LOGS_DIR/vllm.log and LOGS_DIR/requests.jsonl."""
    (settings_logs_dir / "vllm.log").write_bytes(FAILED.read_bytes())
    (settings_logs_dir / "requests.jsonl").write_bytes(REQUESTS.read_bytes())
    reports = run_json(capsys, "--errors", "--slow")
    assert reports["errors"]["log"]["files"] == [str(settings_logs_dir / "vllm.log")]
    assert reports["slow"]["requests_log"]["files"] == [str(settings_logs_dir / "requests.jsonl")]


def test_stats_with_only_the_vllm_log_notes_the_missing_request_log(
    settings_logs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--stats on defaults with no requests.jsonl yet still reports the engine and says what is missing."""
    (settings_logs_dir / "vllm.log").write_bytes(OLD.read_bytes())
    report = run_json(capsys, "--stats")["stats"]
    assert report["requests"] is None and "request log not found" in report["requests_missing"]
    assert report["engine"]["samples"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--errors", "--log", "/nonexistent/vllm.log"], "vLLM log not found: /nonexistent/vllm.log"),
        (["--errors", "--log", str(Path(__file__).parent)], "is a folder: point --log at a vLLM log file in it"),
        (["--slow", "--requests", "/nonexistent/requests.jsonl"], "send a request first, or point --requests"),
        (["--stats", "--log", "/nonexistent/vllm.log", "--requests", str(REQUESTS)], "or point --log at"),
        (["--errors", "--since", "yesterday"], "use a duration back from now (90s, 15m, 1h, 2d) or a local date"),
        (["--slow", "--threshold-ms", "fast"], "--threshold-ms 'fast' is not a number"),
        (["--slow", "--threshold-ms", "-5"], "expected a positive number of milliseconds"),
        (["--errors", "--limit", "-1"], "--limit '-1': expected 0 or more"),
        (["--json"], "choose a report: --errors, --slow and/or --stats"),
        (["--errors", "--bogus"], "option --bogus not recognized"),
        (["--errors", "vllm.log"], "files go after --log or --requests"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Missing files, bad --since/numbers, no report or unknown options: exit code 2 and a message saying why."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err


def test_both_default_files_missing_is_an_error(settings_logs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--stats with neither file present exits 2 and names both."""
    code, _, err = run(capsys, "--stats")
    assert code == 2 and "vLLM log not found" in err and "request log not found" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints the usage with every option."""
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--threshold-ms MS" in out and "--since WHEN" in out


def test_module_entry_point_runs(tmp_path: Path) -> None:
    """``python -m logtools`` works as a command (what make logs-errors runs)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "logtools", "--errors", "--json", "--log", str(FAILED)]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["errors"]["events"] == 5


def test_stats_text_counts_cancelled_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cancelled request (Stop in the UI, a run's cut request) is in a bucket of its own: ok + errors + cancelled
    add up to the requests counted, in the text as in --json."""
    line = ('{{"ts": "2026-11-29T22:03:1{i}.000+00:00", "source": "loadtest", "request_id": "r{i}", "model": "m", '
            '"prompt_tokens": 3, "completion_tokens": 4, "ttft_ms": 10.0, "total_ms": 20.0, "status": "{status}", '
            '"error": {error}}}\n')  # fmt: skip
    statuses = [("ok", "null"), ("ok", "null"), ("error", '"boom"'), ("cancelled", '"incomplete: cancelled"')]
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(line.format(i=i, status=s, error=e) for i, (s, e) in enumerate(statuses)))
    code, out, err = run(capsys, "--stats", "--log", str(OLD), "--requests", str(log))
    assert code == 0, err
    assert "4 (ok 2, errors 1, cancelled 1, error rate 25.00%)" in out
    stats = run_json(capsys, "--stats", "--log", str(OLD), "--requests", str(log))["stats"]["requests"]
    assert stats["ok"] + stats["errors"] + stats["cancelled"] == stats["requests"] == 4


def test_after_a_switch_the_default_reads_every_engines_log_and_log_names_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """After ``./start_vllm.sh`` the serving engine writes ``vllm-b.log`` while the first engine's requests and
    warnings stay in ``vllm.log``: ``--errors`` and ``--stats`` read both by default (a fresh user's stats covered
    the new engine only), and ``--log FILE`` still reads just that file."""
    warn = "(APIServer pid={pid}) WARNING 12-07 04:1{m}:00 [cpu.py:224] Triton is not installed.\n"
    (tmp_path / "vllm.log").write_text(warn.format(pid=1, m=0) * 2)
    (tmp_path / "vllm-b.log").write_text(warn.format(pid=2, m=5) * 3)
    (tmp_path / "requests.jsonl").write_text("")
    both = run_json(capsys, "--errors", "--json", "--logs-dir", str(tmp_path))["errors"]
    assert both["events"] == 5 and len(both["log"]["files"]) == 2, both
    code, out, _ = run(capsys, "--errors", "--logs-dir", str(tmp_path))
    assert code == 0 and out.splitlines()[0].startswith(f"Problems in {tmp_path / 'vllm.log'} (+ vllm-b.log): 5 events")
    one = run_json(capsys, "--errors", "--json", "--log", str(tmp_path / "vllm-b.log"))["errors"]
    assert one["events"] == 3 and len(one["log"]["files"]) == 1
