"""A new user's first commands: ``evalkit init`` to a gated project, ``evalkit scorers list``,
``--version``, defaults in ``--help``, a quiet broken pipe, config discovery, ``demo serve
--detach``, and the loopback placeholder key said out loud."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from evalkit.cli import main
from evalkit.cli.init import project_files
from evalkit.demo.server import DemoServer
from evalkit.run import providers
from evalkit.scorers.registry import SCORERS
from evalkit.version import __version__

EVALKIT = str(Path(sys.executable).parent / "evalkit")


def test_init_lint_run_compare_gate_in_a_fresh_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_server: DemoServer, capsys
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # the note is printed once per process and endpoint: an earlier test may have had it
    monkeypatch.setattr(providers, "_NOTED", set())
    assert main(["init", str(tmp_path / "proj")]) == 0
    out = capsys.readouterr().out
    assert "wrote 12 files" in out and "notebooks/slices.ipynb" in out and "jupyter lab" in out
    monkeypatch.chdir(tmp_path / "proj")
    config = Path("evalkit.yaml").read_text()
    for needle in ("base_url:", "api_key_env: OPENAI_API_KEY", "# provider: python", "app:answer"):
        assert needle in config, needle
    assert main(["cases", "lint"]) == 0  # no flags: ./evalkit.yaml is found
    out = capsys.readouterr().out
    assert "my-assistant: 4 cases" in out and "must_pass 2" in out
    url = [f"--set=system.base_url={demo_server.base_url}"]
    assert main(["run", "--label", "baseline", "--no-progress", *url]) == 0
    out, err = capsys.readouterr()
    assert "passed 4, failed 0, errors 0" in out, out + err
    assert "OPENAI_API_KEY is not set; sending the placeholder key" in err
    assert main(["run", "--label", "candidate", "--no-progress", *url]) == 0
    assert main(["compare", "baseline", "candidate"]) == 0
    assert main(["gate", "baseline", "candidate"]) == 0, capsys.readouterr()
    assert list(Path("reports").glob("*/gate.html"))
    # init never overwrites, a notebook either
    assert main(["init", "."]) == 2
    assert "never overwrites" in capsys.readouterr().err
    fresh = tmp_path / "fresh"
    (fresh / "notebooks").mkdir(parents=True)
    (fresh / "notebooks" / "power.ipynb").write_text("mine")
    assert main(["init", str(fresh)]) == 2
    assert "already has notebooks/power.ipynb" in capsys.readouterr().err
    assert (fresh / "notebooks" / "power.ipynb").read_text() == "mine"
    assert not (fresh / "evalkit.yaml").exists()


def test_the_python_stub_runs_as_the_system_under_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    main(["init", str(tmp_path)])
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sets = ["--set", "system.provider=python", "--set", "system.function=app:answer"]
    assert main(["run", "--label", "stub", "--no-progress", *sets]) == 0
    assert "4 outputs" in capsys.readouterr().out


def test_scaffold_covers_the_main_scorers() -> None:
    cases = project_files()["cases/support.yaml"]
    for needle in ("must_pass", "provenance", "tags", "json_schema", "json_fields", "not_contains"):
        assert needle in cases, needle
    assert "vars:" in cases and "messages:" in cases


def test_version_scorers_and_help(capsys) -> None:
    assert main(["--version"]) == 0  # printed without building the parser
    assert capsys.readouterr().out == f"evalkit {__version__}\n"
    with pytest.raises(SystemExit) as stop:  # argparse's own, after another option
        main(["--version", "--help"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"evalkit {__version__}\n"
    assert main(["scorers", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {e["name"] for e in listed} == set(SCORERS)
    one_of = next(e for e in listed if e["name"] == "one_of")
    assert {"name": "field", "required": False, "default": None} in one_of["args"]
    assert one_of["description"].startswith("Pass when") and one_of["tier"] == "deterministic"
    judge = next(e for e in listed if e["name"] == "judge")
    assert judge["tier"] == "judge" and any(a.get("file") for a in judge["args"])
    assert main(["scorers", "list"]) == 0
    assert "json_fields" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: run)" in text and "(default: data/evalkit.duckdb)" in text
    assert "./evalkit.yaml, else corpus/evalkit.yaml" in text


def test_config_discovery_prefers_dot_evalkit_yaml(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["cases", "lint"]) == 2
    assert "corpus/evalkit.yaml: suite config not found" in capsys.readouterr().err
    main(["init", "corpus"])
    capsys.readouterr()
    assert main(["cases", "lint"]) == 0  # corpus/evalkit.yaml
    assert capsys.readouterr().out.startswith("my-assistant: 4 cases")
    main(["init", "."])
    config = Path("evalkit.yaml")
    config.write_text(config.read_text().replace("suite: my-assistant", "suite: top-level"))
    capsys.readouterr()
    assert main(["cases", "lint"]) == 0  # ./evalkit.yaml comes first
    assert capsys.readouterr().out.startswith("top-level: 4 cases")


def test_broken_pipe_exits_quietly() -> None:
    result = subprocess.run(
        # `true` exits without reading: every write evalkit makes hits a closed pipe
        ["bash", "-c", f"set -o pipefail; {EVALKIT} scorers list --json | true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_demo_serve_detach_exports_and_refuses_a_busy_port(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env["TMPDIR"] = str(tmp_path)  # where the server's log goes
    result = subprocess.run(
        [EVALKIT, "demo", "serve", "--port", "0", "--detach"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    exports = dict(kv.split("=", 1) for kv in result.stdout.split()[1:])
    pid = int(exports["EVALKIT_DEMO_PID"])
    try:
        url = exports["EVALKIT_DEMO_URL"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert "kill $EVALKIT_DEMO_PID" in result.stderr
        assert f"log {tmp_path}/evalkit-demo-" in result.stderr  # named, and in TMPDIR
        port = url.rsplit(":", 1)[1].removesuffix("/v1")
        busy = subprocess.run(
            [EVALKIT, "demo", "serve", "--port", port, "--detach"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert busy.returncode == 2 and busy.stdout == ""
        assert "the demo simulator did not start" in busy.stderr and port in busy.stderr
    finally:
        os.kill(pid, signal.SIGTERM)


class _Unauthorized(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b'{"error": {"message": "invalid api key"}}'
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


def test_a_401_after_the_placeholder_key_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        main(["init", str(tmp_path)])
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("MY_KEY", raising=False)
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        sets = ["--set", f"system.base_url={url}", "--set", "system.api_key_env=MY_KEY"]
        main(["run", "--label", "x", "--no-progress", *sets])
        out, err = capsys.readouterr()
        assert "errors 4" in out
        assert "MY_KEY is not set; sending the placeholder key 'evalkit-local-no-key'" in err
        import evalkit

        with evalkit.open_store("data/evalkit.duckdb", read_only=True) as store:
            causes = store.outputs(store.resolve_run("x"))["error"].to_list()
        assert causes and all("HTTP 401" in c and "MY_KEY is not set" in c for c in causes)
    finally:
        server.shutdown()
        server.server_close()
