"""Suite config (``corpus/evalkit.yaml``) and CLI overrides (the run manifest built from it is
:mod:`evalkit.corpus.manifest`).

API keys are read from the environment by *name* (``api_key_env``); the key itself is never
stored, hashed or printed.

Examples:
    >>> suite = load_suite("corpus/evalkit.yaml", overrides=["concurrency=4"])  # doctest: +SKIP
    >>> suite.config.concurrency                                                # doctest: +SKIP
    4
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from evalkit.corpus.config_files import DEFAULT_CONFIG, resolve_config
from evalkit.corpus.scorer_modules import import_scorer_modules
from evalkit.corpus.selection import TierConfig
from evalkit.corpus.yaml_input import YAMLInputError, parse_yaml
from evalkit.corpus.yaml_nodes import node_line
from evalkit.errors import ConfigError
from evalkit.redact import strip_userinfo

#: Where the official ``openai`` client sends requests when neither the config nor
#: ``OPENAI_BASE_URL`` names an endpoint.
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Endpoint:
    """Where requests go, after environment resolution, and what named it.

    ``url`` is what the provider connects to (userinfo included: it authenticates);
    :attr:`recorded` is what the manifest and the cache key carry (userinfo stripped).
    """

    url: str | None  # None: no endpoint (a python system)
    source: Literal["config", "OPENAI_BASE_URL", "default"] | None

    @property
    def recorded(self) -> str | None:
        """``url`` without ``user:password@`` (a password in a URL is a key)."""
        return strip_userinfo(self.url)


def resolve_endpoint(
    base_url: str | None, *, reads_env: bool, environ: Mapping[str, str] | None = None
) -> Endpoint:
    """The endpoint a client configured with ``base_url`` talks to: ``base_url``, else
    ``OPENAI_BASE_URL`` when the client reads it (``reads_env``: the official ``openai``
    client does, the lean transport does not), else the OpenAI API. A trailing ``/`` is
    dropped: both transports join ``/chat/completions`` to the same URL either way.

    Examples:
        >>> env = {"OPENAI_BASE_URL": "http://u:pw@gw.local:8000/v1/"}
        >>> resolve_endpoint(None, reads_env=True, environ=env)
        Endpoint(url='http://u:pw@gw.local:8000/v1', source='OPENAI_BASE_URL')
        >>> resolve_endpoint(None, reads_env=True, environ=env).recorded
        'http://gw.local:8000/v1'
        >>> resolve_endpoint(None, reads_env=False, environ=env).source
        'default'
        >>> resolve_endpoint("http://127.0.0.1:9/v1", reads_env=True, environ=env).source
        'config'
    """
    if base_url and base_url.strip():
        return Endpoint(base_url.strip().rstrip("/"), "config")
    named = (os.environ if environ is None else environ).get("OPENAI_BASE_URL", "")
    if reads_env and named.strip():  # an empty variable names nothing (the client's "" fails)
        return Endpoint(named.strip().rstrip("/"), "OPENAI_BASE_URL")
    return Endpoint(OPENAI_DEFAULT_BASE_URL, "default")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sampling(_Strict):
    temperature: float | None = 0.0
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None


class IndexConfig(_Strict):
    """The retrieval index a system reads: part of the config hash, as the corpus is."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)


class Replica(_Strict):
    """One replica of a self-hosted model (``system.base_urls``) and its cap on requests in
    flight (None: only the run's concurrency)."""

    url: str = Field(min_length=1)
    max_in_flight: int | None = Field(default=None, ge=1)


class SystemConfig(_Strict):
    """The system under test."""

    provider: Literal["openai", "python", "demo"] = "openai"
    model: str
    snapshot: str | None = None  # pinned snapshot id when the model name is an alias
    base_url: str | None = None
    # Replicas of one self-hosted model: each request goes to the one with the fewest requests
    # in flight (evalkit.run.replicas). base_url (default: the first replica) names the fleet
    # in the manifest and the cache key.
    base_urls: list[str | Replica] = Field(default_factory=list)
    api_key_env: str | None = "OPENAI_API_KEY"  # the variable's *name*; never the key
    prompt: str | None = None  # system prompt file, relative to the corpus root
    prompt_version: str | None = None
    user_template: str = "{{message}}"
    tools: str | None = None  # JSON file with OpenAI tool schemas, relative to the corpus root
    function: str | None = None  # python provider: "package.module:function"
    sampling: Sampling = Field(default_factory=Sampling)
    timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    max_retries: int = Field(default=4, ge=0, le=20)
    # A Retry-After longer than this is a stored error, not an hour-long sleep holding a slot.
    max_retry_after_s: float = Field(default=60.0, gt=0, le=3600, allow_inf_nan=False)
    # A response body larger than this (MB of 2**20 bytes, on the wire or decompressed) is that
    # case's stored error, read no further: a gzip bomb or an endless body cannot eat the run.
    max_response_mb: float = Field(default=32, gt=0, le=4096, allow_inf_nan=False)
    max_steps: int = Field(default=8, ge=1, le=100)
    # Which cases see the tool schemas: only agent cases (those with tool fixtures, so every
    # call can be served) or every case (to catch a model that starts calling tools where it
    # should simply answer; calls without a fixture then fail as unexpected).
    offer_tools: Literal["with_fixtures", "always"] = "with_fixtures"
    # How requests go out. "auto" (the default): the lean aiohttp transport for a named
    # OpenAI-compatible base_url, whose per-request work is a fraction of the official
    # client's (docs/performance.md, "Asking the model"), and the official client for the
    # OpenAI API itself (no base_url, or api.openai.com), which also honours OPENAI_BASE_URL
    # and the organization/project headers.
    transport: Literal["auto", "openai", "lean"] = "auto"
    # What the cache key and config hash know of the system beyond the request: the code
    # (python: the function's module, plus these globs relative to the config's directory), a
    # version string for what evalkit cannot hash (a deployed service), the retrieval index.
    code_paths: list[str] = Field(default_factory=list)
    # Environment variables the system reads (a feature flag): their values, hashed, are part
    # of a python system's identity; an undeclared one is not seen (evalkit.corpus.repo_tree).
    env: list[str] = Field(default_factory=list)
    version: str | None = None
    index: IndexConfig | None = None

    def resolved_transport(self) -> Literal["openai", "lean"]:
        """The transport requests use: ``transport``, with ``auto`` resolved by ``base_url``.

        Examples:
            >>> SystemConfig(model="m", base_url="http://127.0.0.1:8000/v1").resolved_transport()
            'lean'
            >>> SystemConfig(model="gpt-4.1-mini").resolved_transport()
            'openai'
        """
        if self.transport != "auto":
            return self.transport
        host = urlparse(self.base_url or "").hostname or ""
        return "lean" if self.base_url and host != "api.openai.com" else "openai"

    def effective_endpoint(self) -> Endpoint:
        """The endpoint requests go to, read from the environment now: the one the provider
        connects to (:func:`evalkit.run.providers.make_provider`), the manifest records and
        the response cache keys on. A python system has none.

        Examples:
            >>> SystemConfig(model="m", base_url="http://127.0.0.1:8000/v1/").effective_endpoint()
            Endpoint(url='http://127.0.0.1:8000/v1', source='config')
        """
        if self.provider == "python":
            return Endpoint(None, None)
        return resolve_endpoint(self.base_url, reads_env=self.resolved_transport() == "openai")

    @model_validator(mode="before")
    @classmethod
    def _fleet_name(cls, data: Any) -> Any:
        """``base_url`` defaults to the first of ``base_urls``."""
        if isinstance(data, dict) and data.get("base_urls") and not data.get("base_url"):
            first = data["base_urls"][0]
            url = first.get("url") if isinstance(first, dict) else first
            if isinstance(url, str):
                data = {**data, "base_url": url}
        return data

    @property
    def replicas(self) -> list[Replica]:
        """``base_urls`` as :class:`Replica` values (empty: one endpoint, ``base_url``)."""
        return [r if isinstance(r, Replica) else Replica(url=r) for r in self.base_urls]


class JudgeConfig(_Strict):
    provider: Literal["openai", "demo"] = "openai"
    model: str
    snapshot: str | None = None
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    max_retries: int = Field(default=4, ge=0, le=20)
    # A Retry-After longer than this is a stored error, not an hour-long sleep holding a slot.
    max_retry_after_s: float = Field(default=60.0, gt=0, le=3600, allow_inf_nan=False)

    def resolved_transport(self) -> Literal["openai", "lean"]:
        """The judge's transport, as ``system.transport: auto`` picks it: lean for a named
        OpenAI-compatible ``base_url``, the official client for the OpenAI API (or an unset
        ``base_url``: ``OPENAI_BASE_URL``). A judge-heavy run makes as many judge calls as
        system calls; the official client's CPU per call is ~6x lean's (bench/bench_judge.py).

        Examples:
            >>> JudgeConfig(model="j", base_url="http://127.0.0.1:8000/v1").resolved_transport()
            'lean'
            >>> JudgeConfig(model="gpt-4.1").resolved_transport()
            'openai'
        """
        host = urlparse(self.base_url or "").hostname or ""
        return "lean" if self.base_url and host != "api.openai.com" else "openai"

    def effective_endpoint(self) -> Endpoint:
        """The endpoint judge requests go to (``OPENAI_BASE_URL`` when ``base_url`` is unset)."""
        return resolve_endpoint(self.base_url, reads_env=True)


class Price(_Strict):
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class RateLimit(_Strict):
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    # Requests in flight at once across every worker of a distributed run (the Ray engine's
    # shared budget); a local run is capped by its concurrency.
    max_in_flight: int | None = Field(default=None, ge=1)


#: A replay pass rule as written (``evalkit.compare.pass_rules.parse_rule`` reads it): majority,
#: all, any, ``k_of_n: K/N`` or ``K/N``; YAML makes ``{k_of_n: 4/5}`` of the unquoted form.
_RULE = re.compile(r"^\s*(majority|all|any|(?:k_of_n\s*:?\s*)?(\d+)\s*/\s*(\d+))\s*$")


def _rule_text(value: Any) -> str:
    if isinstance(value, Mapping) and list(value) == ["k_of_n"]:
        value = f"k_of_n: {value['k_of_n']}"
    match = _RULE.match(str(value)) if isinstance(value, str | Mapping) else None
    if match is None or (match[2] and not 1 <= int(match[2]) <= int(match[3])):
        raise ValueError(
            f"{value!r} is not a rule: use majority, all, any or k_of_n: K/N (1 ≤ K ≤ N)"
        )
    return str(value).strip()


class PassRulesConfig(_Strict):
    """How replays become one verdict per case (``replays: {n: 5, pass_rule: ..., tags: {...},
    cases: {...}}``): the case's own rule, else its tags' strictest, else ``pass_rule``."""

    pass_rule: str = "majority"
    tags: dict[str, str] = Field(default_factory=dict)
    cases: dict[str, str] = Field(default_factory=dict)

    @field_validator("pass_rule", mode="before")
    @classmethod
    def _one(cls, value: Any) -> str:
        return _rule_text(value)

    @field_validator("tags", "cases", mode="before")
    @classmethod
    def _each(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value  # pydantic says what is wrong with it
        return {str(k): _rule_text(v) for k, v in value.items()}

    @property
    def is_default(self) -> bool:
        return self.pass_rule == "majority" and not self.tags and not self.cases


class CorpusPolicy(_Strict):
    """``policy:`` in evalkit.yaml: what ``evalkit cases lint`` asks of the cases themselves."""

    # Cases that must name a reviewer and a date in their provenance: `must_pass` cases, and
    # `critical` (those carrying a critical tag). Checked by evalkit.corpus.drafts.
    require_provenance: list[Literal["must_pass", "critical"]] = Field(default_factory=list)


class SuiteConfig(_Strict):
    suite: str
    system: SystemConfig
    concurrency: int = Field(default=8, ge=1, le=4096)
    # `replays: 5`, or `replays: {n: 5, pass_rule: ..., tags: ..., cases: ...}`: the mapping's
    # rules land in pass_rules (the manifest's gate policy pins them; see _replays_mapping).
    replays: int = Field(default=1, ge=1, le=100)
    pass_rules: PassRulesConfig = Field(default_factory=PassRulesConfig)
    critical_tags: list[str] = Field(default_factory=list)
    gate: dict[str, Any] = Field(default_factory=dict)
    budgets: dict[str, Any] = Field(default_factory=dict)
    prices: dict[str, Price] = Field(default_factory=dict)
    judge: JudgeConfig | None = None
    rate_limit: RateLimit | None = None
    cache: bool = True
    tiers: dict[str, TierConfig] = Field(default_factory=dict)  # named selections (--tier)
    scorers: list[str] = Field(default_factory=list)  # modules registering your own scorers
    # Live tools (`lookup_order: myapp.tools:lookup_order`): answer tool calls only in a
    # `kind: live` configuration, an end-to-end run that is reported, never promoted or gated;
    # `evalkit fixtures record/check/refresh` freeze and re-check the cases' fixtures from them
    # (evalkit.run.live_tools). Imported only when used.
    tools: dict[str, str] = Field(default_factory=dict)
    kind: Literal["fixtures", "live"] = "fixtures"
    # The team's shared store (`store: {shared: sqlite:///ci/catalog.db}`, evalkit.store.shared):
    # where `evalkit push/pull` and the response cache go besides the local DuckDB file. Its
    # credentials come from the environment, never from here (a password in it is refused).
    store: dict[Literal["shared"], str] = Field(default_factory=dict)
    policy: CorpusPolicy = Field(default_factory=CorpusPolicy)  # asked of the cases (lint)

    @model_validator(mode="before")
    @classmethod
    def _replays_mapping(cls, raw: Any) -> Any:
        """``replays: {n, pass_rule, tags, cases}``: n is the replay count, the rest the rules
        (errors in them are reported under ``replays.`` by `_config_error`)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("replays"), Mapping):
            return raw
        rules = dict(raw["replays"])
        return {**raw, "replays": rules.pop("n", 1), "pass_rules": rules}

    @field_validator("tools")
    @classmethod
    def _tool_specs(cls, tools: dict[str, str]) -> dict[str, str]:
        for name, spec in tools.items():
            module, _, attr = spec.partition(":")
            if not module.strip() or not attr.strip():
                raise ValueError(f"{name}: {spec!r} is not 'package.module:function'")
        return tools


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its validated config plus the files it references, read once."""

    config: SuiteConfig
    path: Path
    root: Path  # corpus root: the config file's directory
    system_prompt: str | None
    tools: list[dict[str, Any]] | None

    def resolve(self, name: str) -> Path:
        """A path relative to the corpus root, refused when it escapes the root."""
        resolved = (self.root / name).resolve()
        if not resolved.is_relative_to(self.root):
            raise ConfigError(f"{self.path}: {name!r} is outside the corpus root {self.root}")
        return resolved


def load_suite(
    path: str | Path = DEFAULT_CONFIG,
    *,
    overrides: list[str] | tuple[str, ...] = (),
    prompt: str | Path | None = None,
) -> Suite:
    """Read ``evalkit.yaml``, apply ``--set key=value`` overrides and ``--prompt FILE``.

    Raises:
        ConfigError: one line naming the file and the offending key.
    """
    config_path = resolve_config(path) if Path(path).is_dir() else Path(path)
    if not config_path.is_file():
        raise ConfigError(f"{config_path}: suite config not found")
    try:
        raw, node = parse_yaml(config_path.read_text(encoding="utf-8"))
    except YAMLInputError as exc:
        where = f"{config_path}:{exc.line}" if exc.line else str(config_path)
        where += f":{exc.column}" if exc.line and getattr(exc, "column", None) else ""
        raise ConfigError(f"{where}: {exc.problem}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{config_path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{config_path}: cannot read: {exc.strerror or exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{config_path}: the suite config must be a YAML mapping")
    for item in overrides:
        raw = apply_override(raw, item, config_path)
    root = config_path.resolve().parent
    if prompt is not None:
        prompt_path = Path(prompt).resolve()
        if not prompt_path.is_file():  # the flag's file, not the config's: blame the flag
            raise ConfigError(f"--prompt {prompt}: file not found")
        raw.setdefault("system", {})
        if not isinstance(raw["system"], dict):
            raise ConfigError(f"{config_path}: 'system' must be a mapping")
        raw["system"]["prompt"] = (
            str(prompt_path.relative_to(root))
            if prompt_path.is_relative_to(root)
            else str(prompt_path)
        )
        raw["system"].setdefault("prompt_version", None)
        if raw["system"]["prompt_version"] is None:
            raw["system"]["prompt_version"] = prompt_path.stem
    try:
        config = SuiteConfig.model_validate(raw)
    except ValidationError as exc:
        raise _config_error(exc, config_path, node, overrides) from None
    if config.kind == "live" and not config.tools:
        line = node_line(node, ["kind"]) if node is not None else None
        raise ConfigError(
            f"{config_path}{f':{line}' if line else ''}: kind: live needs tools: (a tool name: "
            "'package.module:function' each) to answer the calls"
        )
    import_scorer_modules(config.scorers, root, config_path)
    system_prompt = _read_optional(root, config.system.prompt, config_path, "system.prompt")
    tools_text = _read_optional(root, config.system.tools, config_path, "system.tools")
    tools = None
    if tools_text is not None:
        try:
            tools = json.loads(tools_text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{config.system.tools}:{exc.lineno}: invalid JSON: {exc.msg}"
            ) from None
        except RecursionError:
            raise ConfigError(f"{config.system.tools}: JSON nested too deeply") from None
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function", {}), dict) for t in tools
        ):
            raise ConfigError(
                f"{config.system.tools}: tool schemas must be a JSON list of objects "
                '({"type": "function", "function": {...}})'
            )
    if config.system.provider == "python" and not config.system.function:
        raise ConfigError(
            f"{config_path}: provider 'python' needs system.function (module:function)"
        )
    return Suite(config, config_path.resolve(), root, system_prompt, tools)


def apply_override(raw: dict[str, Any], item: str, source: Path | str = "--set") -> dict[str, Any]:
    """Apply one ``key.sub=value`` override; the value is parsed as YAML (``4``, ``true``, ``[a]``).

    Examples:
        >>> apply_override({"system": {"model": "a"}}, "system.model=b")
        {'system': {'model': 'b'}}
    """
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value")
    key, _, text = item.partition("=")
    try:
        value = parse_yaml(text)[0] if text.strip() else ""
    except YAMLInputError:
        value = text
    result = json.loads(json.dumps(raw, default=str))  # deep copy of plain data
    node = result
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {item!r}: empty key")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {item!r}: {part!r} is not a mapping in {source}")
        node = child
    node[parts[-1]] = value
    return result


#: What a suite config must give (everything else has a default).
REQUIRED_KEYS = ("suite", "system.model")


def _config_error(
    exc: ValidationError, config_path: Path, node: Any, overrides: Sequence[str]
) -> ConfigError:
    """One line for the first validation error, blamed on the ``--set`` that made it, else on
    the file's line; unknown keys get a did-you-mean (also one level up or down: ``sampling``
    lives under ``system``)."""
    error = exc.errors()[0]
    if error["loc"][:1] == ("pass_rules",):  # written under replays: (`_replays_mapping`)
        error = {**error, "loc": ("replays", *error["loc"][1:])}
    loc = [str(p) for p in error["loc"]]
    key = ".".join(loc)
    key = key if len(key) <= 80 else key[:77] + "..."
    if error["type"] == "extra_forbidden":
        problem = f"unknown key {key!r}{_suggest_key(loc)}"
    elif error["type"] == "missing":
        problem = (
            f"missing required key {key!r} (a suite config needs "
            f"{', '.join(REQUIRED_KEYS)}; system.function too for provider: python)"
        )
    else:
        problem = f"invalid value for {key!r}: {error['msg']}"
    for item in reversed(overrides):  # the last --set of a key is the one that counts
        parts = [p for p in item.partition("=")[0].strip().split(".") if p]
        if parts and (parts[: len(loc)] == loc or loc[: len(parts)] == parts):
            return ConfigError(f"--set {item}: {problem} (the option, not {config_path.name})")
    line = node_line(node, error["loc"]) if node is not None else None
    return ConfigError(f"{config_path}:{line}: {problem}" if line else f"{config_path}: {problem}")


def _config_keys(model: type[BaseModel] = SuiteConfig, prefix: str = "") -> list[str]:
    """Every dotted key a suite config accepts (``system.sampling.temperature``, ...)."""
    keys = []
    for name, info in model.model_fields.items():
        keys.append(prefix + name)
        for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                keys.extend(_config_keys(arg, f"{prefix}{name}."))
                break
    return keys


def _suggest_key(loc: list[str]) -> str:
    import difflib

    keys = _config_keys()
    parent = ".".join(loc[:-1])
    siblings = [k.rsplit(".", 1)[-1] for k in keys if k.rpartition(".")[0] == parent]
    # the closest key name, here or anywhere (a sibling wins a tie): 'temprature' is
    # system.sampling.temperature, not system.user_template
    candidates = [(k.rsplit(".", 1)[-1], k) for k in keys]
    candidates += [(name, ".".join([*loc[:-1], name])) for name in siblings]
    close = []
    for name, key in candidates:
        matcher = difflib.SequenceMatcher(None, loc[-1], name)
        # the lengths' bound first, as difflib.get_close_matches does: ratio() alone walks the
        # whole unknown key once per candidate, quadratic in a pasted-in megabyte key
        if matcher.real_quick_ratio() >= 0.6 and (ratio := matcher.ratio()) >= 0.6:
            close.append((ratio, key))
    if close:
        return f" (did you mean {max(close)[1]!r}?)"
    return f" (keys here: {', '.join(sorted(siblings))})" if siblings else ""


def _read_optional(root: Path, name: str | None, config_path: Path, key: str) -> str | None:
    if name is None:
        return None
    shown = repr(name) if len(name) <= 120 else f"{name[:120]!r}..."
    try:
        path = (root / name).resolve()
        if not path.is_file():
            raise ConfigError(f"{config_path}: {key} file {shown} not found")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{config_path}: {key} file {shown} is not UTF-8 text") from None
    except (OSError, ValueError) as exc:  # NUL bytes, names too long, unreadable
        reason = getattr(exc, "strerror", None) or exc  # strerror: without the long name
        raise ConfigError(f"{config_path}: {key} file {shown} cannot be read: {reason}") from None
