"""The typed run manifest: every stored shape migrates, the JSON form round-trips, and a
manifest a newer evalkit wrote is refused in one line (tests mirror evalkit/run_manifest.py)."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import duckdb
import pytest

from evalkit.cli import main
from evalkit.corpus.manifest import config_hash, manifest_diff
from evalkit.errors import StoreError
from evalkit.run_manifest import (
    COMPARABLE_FIELDS,
    MANIFEST_VERSION,
    CorpusInfo,
    JudgeInfo,
    ModelInfo,
    ProviderInfo,
    RunInfo,
    RunManifest,
)
from evalkit.store import open_store
from evalkit.store.parts import PartsRoot


class _Case:
    def __init__(self, case_id: str) -> None:
        self.id, self.tags, self.hash = case_id, ("billing",), "h-" + case_id
        self.criticality, self.sealed, self.provenance = "normal", False, {}
        self.source, self.group = "cases/a.yaml:1", None

    def input_json(self) -> str:
        return "{}"


def _foundation() -> dict:
    """The first shape (2026-11-30, evalkit/config.py build_manifest): no warnings, system,
    requests, kind, gate policy, rerun settings or sandbox; tools without ``offer``; run
    without ``config``."""
    return {
        "suite": "support",
        "provider": {
            "name": "openai",
            "base_url": "http://127.0.0.1:8000/v1",
            "function": None,
            "simulator": True,
        },
        "model": {"id": "demo-small", "snapshot": "demo-small"},
        "prompt": {
            "version": "v1",
            "template_hash": "t" * 64,
            "system_prompt_hash": "s" * 64,
            "user_template_hash": None,
        },
        "tools": {"hash": "h" * 64, "names": ["lookup_order"], "max_steps": 4},
        "sampling": {"temperature": 0.0, "top_p": None, "seed": 7, "max_tokens": 256},
        "judge": None,
        "replays": 1,
        "scorer_files": {"schemas/refund.json": "f" * 64},
        "harness": {"evalkit": "0.1.0"},
        "corpus": {"hash": "c" * 64, "n_cases": 78},
        "selection": {"tier": None, "tags": []},
        "client": {"python": "3.11.9", "openai": "1.55.0"},
        "run": {
            "run_id": "20261130-aaaa",
            "label": "baseline",
            "created_at": "2026-11-30T10:00:00+00:00",
            "concurrency": 8,
            "cache": True,
            "git_sha": "a" * 40,
            "git_dirty": False,
        },
    }


def _with(shape: dict, **top: object) -> dict:
    return {**copy.deepcopy(shape), **copy.deepcopy(top)}


def _shapes() -> dict[str, dict]:
    """Each unversioned shape evalkit stored, oldest first (git log of build_manifest)."""
    found = {"foundation": _foundation()}
    warned = _with(found["foundation"], warnings=["judge shares the model family"])
    warned["judge"] = {
        "model": "demo-judge",
        "snapshot": "demo-judge",
        "provider": "demo",
        "rubric_hashes": {"rubrics/tone.md": "r" * 64},
    }
    found["warnings and judge"] = warned
    offered = _with(warned)
    offered["tools"]["offer"] = True
    found["tools.offer"] = offered
    identified = _with(
        offered,
        system={"code": None, "code_fingerprint": None, "version": None, "index": None},
        requests={"transport": "openai", "concurrency": 8, "rate_limit": None},
    )
    found["system and requests"] = identified
    pinned = _with(
        identified,
        gate_policy={"critical_tags": ["billing"], "gate": {}, "budgets": {}, "tiers": {}},
        rerun={
            "system_prompt": "Be kind.",
            "user_template": None,
            "tools": [],
            "prompt": None,
            "prompt_version": "v1",
        },
    )
    pinned["requests"]["base_url_from"] = "config"
    found["gate policy and rerun"] = pinned
    found["sandbox"] = _with(pinned, sandbox={"namespaces": True, "budget": "cgroup v2"})
    live = _with(found["sandbox"], kind="live")
    live["tools"]["live"] = {"lookup_order": "shop.tools:lookup"}
    found["kind: live"] = live
    shared = _with(pinned, kind="fixtures")
    shared["corpus"]["shares"] = {"count": 2, "hashes": ["x", "y"], "n_cases": [39, 39]}
    found["corpus.shares"] = shared
    newest = _with(shared)
    newest["run"]["config"] = "/repo/corpus/evalkit.yaml"
    found["run.config"] = newest
    found["exam run"] = _with(newest, exam={"of": "base", "for": "cand", "exam_id": "e1"})
    found["rebaseline run"] = _with(newest, rebaseline={"of": "base", "for": "cand"})
    for shape in found.values():
        shape["config_hash"] = config_hash(shape)  # as the evalkit that wrote it hashed it
    return found


SHAPES = _shapes()


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_stored_shape_migrates_keeping_what_it_recorded(name: str) -> None:
    stored = SHAPES[name]
    manifest = RunManifest.from_stored(stored)
    assert manifest.version == MANIFEST_VERSION == 1
    # the configuration's parts exactly as recorded: the stored hash is still its hash
    assert config_hash(manifest) == stored["config_hash"] == manifest.config_hash
    for field in COMPARABLE_FIELDS:
        assert manifest.recorded(field) == stored.get(field), field
    assert manifest.run == RunInfo(**{"config": None, **stored["run"]})
    assert manifest.corpus == CorpusInfo(**stored["corpus"])
    assert manifest.model == ModelInfo(id="demo-small", snapshot="demo-small")
    assert manifest.provider == ProviderInfo(**stored["provider"])
    assert manifest.warnings == tuple(stored.get("warnings", ()))
    assert manifest.kind == stored.get("kind", "fixtures")
    assert manifest.is_live == (name == "kind: live")
    assert manifest.requests == stored.get("requests", {})
    assert manifest.gate_policy == stored.get("gate_policy")
    assert manifest.rerun == stored.get("rerun")
    assert manifest.sandbox == stored.get("sandbox")
    assert manifest.exam == stored.get("exam") and manifest.rebaseline == stored.get("rebaseline")
    assert manifest.extra == {}
    # what a rewrite stores: the same record, now with its version
    written = manifest.to_dict()
    assert written["version"] == 1 and RunManifest.from_stored(written) == manifest
    assert json.loads(json.dumps(written)) == written


def test_judge_and_shares_are_typed() -> None:
    manifest = RunManifest.from_stored(SHAPES["corpus.shares"])
    assert manifest.judge == JudgeInfo(
        model="demo-judge",
        snapshot="demo-judge",
        provider="demo",
        rubric_hashes={"rubrics/tone.md": "r" * 64},
    )
    assert manifest.corpus.shares == {"count": 2, "hashes": ["x", "y"], "n_cases": [39, 39]}
    assert "shares" not in RunManifest.from_stored(SHAPES["foundation"]).to_dict()["corpus"]


def test_old_and_new_shapes_compare_as_they_did() -> None:
    """A migration fills in no configuration field: a run from before ``tools.offer`` still
    differs in ``tools`` from one after, as it did when both were dicts."""
    old, new = SHAPES["warnings and judge"], SHAPES["tools.offer"]
    typed = RunManifest.from_stored(old), RunManifest.from_stored(new)
    assert manifest_diff(*typed) == manifest_diff(old, new) == ["tools"]


def test_unknown_entries_survive_a_rewrite() -> None:
    stored = _with(SHAPES["run.config"], version=1, reviewed_by={"who": "ana"})
    manifest = RunManifest.from_stored(stored)
    assert manifest.extra == {"reviewed_by": {"who": "ana"}}
    assert manifest.to_dict() == stored


def test_a_null_where_a_value_is_due_reads_as_the_default() -> None:
    stored = _with(SHAPES["foundation"], selection=None, requests=None, replays=None)
    manifest = RunManifest.from_stored(stored)
    assert (manifest.selection, manifest.requests, manifest.replays) == ({}, {}, 1)
    assert manifest.tier is None


def test_a_manifest_crosses_a_process_boundary_intact() -> None:
    """Ray ships the manifest to its workers by pickle."""
    manifest = RunManifest.from_stored(SHAPES["kind: live"])
    assert pickle.loads(pickle.dumps(manifest)) == manifest


def test_a_newer_version_is_refused_in_one_line() -> None:
    with pytest.raises(StoreError) as refused:
        RunManifest.from_stored({**SHAPES["run.config"], "version": 2}, source="e.duckdb: run r1")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("e.duckdb: run r1: the run manifest is version 2")
    assert "reads versions up to 1: upgrade evalkit" in message
    for bad in ("2", -1, True):
        with pytest.raises(StoreError, match="is not a version"):
            RunManifest.from_stored({"version": bad})


def test_the_store_keeps_the_json_form_with_its_version(tmp_path: Path) -> None:
    path = tmp_path / "e.duckdb"
    stored = SHAPES["sandbox"]
    with open_store(path, write=True) as store:
        store.create_run(RunManifest.from_stored(stored), [_Case("a")])
        store.finish_run("20261130-aaaa", "complete", {}, warnings=["new"])
        manifest = store.manifest("20261130-aaaa")
    assert manifest.warnings == ("new",) and manifest.config_hash == stored["config_hash"]
    with duckdb.connect(str(path), read_only=True) as con:
        (text,) = con.execute("SELECT manifest FROM runs").fetchone()
    on_disk = json.loads(text)
    assert on_disk["version"] == 1 and on_disk["gate_policy"] == stored["gate_policy"]
    assert RunManifest.from_stored(on_disk) == manifest


def test_an_unversioned_stored_run_is_read_migrated(tmp_path: Path) -> None:
    """A store an older evalkit wrote (or a pulled team-store run): its JSON has no version."""
    path = tmp_path / "e.duckdb"
    with open_store(path, write=True) as store:
        store.create_run(SHAPES["foundation"], [_Case("a")])
    with duckdb.connect(str(path)) as con:  # as the older evalkit left it
        con.execute("UPDATE runs SET manifest = ?", [json.dumps(SHAPES["foundation"])])
    with open_store(path, read_only=True) as store:
        manifest = store.manifest(store.resolve_run("baseline"))
    assert manifest.version == 1 and manifest.warnings == () and manifest.run.cache is True
    assert manifest.run.label == "baseline" and manifest.kind == "fixtures"


def _store_with_future_manifest(path: Path) -> None:
    with open_store(path, write=True) as store:
        for run_id in ("base", "cand"):
            stored = _with(SHAPES["run.config"], run={"run_id": run_id, "label": run_id})
            store.create_run(stored, [_Case("a")])
            store.finish_run(run_id, "complete", {})
    future = {**SHAPES["run.config"], "version": 7, "run": {"run_id": "cand", "label": "cand"}}
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE runs SET manifest = ? WHERE run_id = 'cand'", [json.dumps(future)])


def test_the_cli_refuses_a_newer_manifest_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "e.duckdb"
    _store_with_future_manifest(path)
    assert main(["compare", "base", "cand", "--db", str(path)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"{path}: run cand: the run manifest is version 7" in lines[0]
    assert "upgrade evalkit" in lines[0]


def test_a_shards_newer_manifest_file_is_refused_naming_it(tmp_path: Path) -> None:
    root = PartsRoot(str(tmp_path / "parts"))
    manifest = RunManifest.from_stored(_with(SHAPES["run.config"], run={"run_id": "r1"}))
    root.write_manifest("r1", "shard-1-of-2", manifest)
    assert root.manifests("r1") == [manifest]
    future = tmp_path / "parts" / "runs" / "r1" / "manifest" / "shard-2-of-2.json"
    future.write_text(json.dumps({**manifest.to_dict(), "version": 9}))
    with pytest.raises(StoreError, match=r"shard-2-of-2\.json: the run manifest is version 9"):
        root.manifests("r1")
