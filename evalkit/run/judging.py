"""The run's model judge: the suite's pinned ``judge:`` behind the response cache, with the
same retries and bounded waits as the system under test."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evalkit.corpus.cases import Corpus
from evalkit.corpus.suite import Suite
from evalkit.errors import ConfigError
from evalkit.run.cache import CachedProvider
from evalkit.run.providers import make_provider
from evalkit.scorers.registry import JUDGE
from evalkit.store import Store

if TYPE_CHECKING:  # imported when a case is judged (judge_client), not by every run
    from evalkit.scorers.judge_client import JudgeClient

__all__ = ["judge_client", "make_judge"]


def make_judge(suite: Suite, corpus: Corpus, store: Store, use_cache: bool) -> JudgeClient | None:
    """The run's judge client (cached), or None when no case uses a judge scorer.

    Raises:
        ConfigError: a case uses a judge scorer but the suite config has no ``judge:``.
    """
    if not any(s.tier == JUDGE for case in corpus.cases for s in case.scorers):
        return None
    require_judge(suite, corpus)
    return judge_client(suite, store, use_cache)


def require_judge(suite: Suite, corpus: Corpus) -> None:
    """Refuse a corpus whose cases use a judge scorer when the suite has no ``judge:`` section,
    naming the first such case: before a run is recorded (it would fail and keep its label),
    and in ``evalkit cases lint``.

    Raises:
        ConfigError: one line, ``file:line (case ID)``, and the section to add.
    """
    if suite.config.judge is not None:
        return
    for case in corpus.cases:
        if any(s.tier == JUDGE for s in case.scorers):
            raise ConfigError(
                f"{case.source} (case {case.id}): the {_judge_name(case)} scorer needs a "
                f"judge: section in {suite.path.name} (judge: {{model: ..., base_url: ...}})"
            )


def _judge_name(case: Any) -> str:
    return next(s.name for s in case.scorers if s.tier == JUDGE)


def judge_client(suite: Suite, store: Store, use_cache: bool = True) -> JudgeClient:
    """The suite's judge (``judge:`` in evalkit.yaml) behind the response cache.

    Raises:
        ConfigError: the suite config has no ``judge:`` section.
    """
    config = suite.config.judge
    if config is None:
        raise ConfigError(f"{suite.path}: no judge: section (judge: {{model: ..., base_url: ...}})")
    # The endpoint the judge really talks to (OPENAI_BASE_URL when base_url is unset), so a
    # judge elsewhere is never served these verdicts; never a password from the URL.
    base_url = config.effective_endpoint().recorded
    identity = {"judge": config.model, "snapshot": config.snapshot, "base_url": base_url}
    # As many judge calls in flight as a run's workers can make (twice its concurrency): a
    # rescore starts a chunk's calls at once, and only the cache's misses wait for a slot.
    in_flight = 2 * suite.config.concurrency
    provider = CachedProvider(
        make_provider(config), store, identity, enabled=use_cache, max_in_flight=in_flight
    )
    from evalkit.scorers.judge_client import JudgeClient

    return JudgeClient(
        provider,
        config.model,
        max_retries=config.max_retries,
        max_retry_after_s=config.max_retry_after_s,
        snapshot=config.snapshot or config.model,  # as the manifest records it
    )
