"""A dead endpoint stops the run before anything is asked or recorded (one TCP connection per
endpoint), names the cause and the fix; a live one, a proxy or one live replica let it run."""

from __future__ import annotations

import socket

import pytest

from evalkit.cli import main
from evalkit.run import preflight
from evalkit.store import open_store


def _dead_url() -> str:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_a_refused_endpoint_stops_the_run_before_anything_is_recorded(
    project_factory, capsys
) -> None:
    project = project_factory()
    db, args = project.db, project.args
    code = main(["run", "--label", "base", "--no-progress", *args,
                 "--set", f"system.base_url={_dead_url()}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot reach the system under test" in err and "connection refused" in err
    assert "nothing was run" in err and "--set system.base_url=URL" in err
    if db.exists():  # no failed run left holding the label
        with open_store(db, read_only=True) as store:
            assert store.runs().height == 0


def test_reachable_says_none_for_a_listener_and_stands_aside_behind_a_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert preflight.reachable(f"http://127.0.0.1:{listener.getsockname()[1]}/v1") is None
    dead = _dead_url()
    assert preflight.reachable(dead) == "connection refused"
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert preflight.reachable(dead) is None  # the proxy connects, not evalkit


def test_one_live_replica_is_enough_and_none_is_one_line_per_endpoint() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        live = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        preflight.check_endpoints([_dead_url(), live])  # no error: the breaker handles the dead
    dead = [_dead_url(), "http://user:SECRETPW@127.0.0.1:1/v1"]
    with pytest.raises(preflight.EvalkitError) as info:
        preflight.check_endpoints(dead)
    message = str(info.value)
    assert message.count("connection refused") == 2 and "SECRETPW" not in message
    assert "\n" not in message
