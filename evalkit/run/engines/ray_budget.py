"""The rate budget of a Ray run: one named, detached actor per endpoint, held by every run that
uses it.

A driver *joins* the budget when it starts (:func:`start_budgets`, creating the actor if no
run holds it), joins again every :data:`HEARTBEAT_S` while it runs (:meth:`Budgets.renew`),
and *leaves* it at the end (:func:`stop_budgets`): the last holder to leave removes the actor,
so a second run still using the budget keeps it. A budget that vanished anyway (killed, its
node lost) is recreated by the next heartbeat of any driver still using it, and its workers
wait for that (at most :data:`BUDGET_PATIENCE_S`) instead of stalling. A driver killed without
leaving stops heartbeating, and its share expires after
:data:`evalkit.run.engines.budget.HOLDER_TTL_S`.

Each holder states its own limits; the actor enforces the strictest of every live holder's, and
a driver whose limits are not the ones enforced is told so (:attr:`Budgets.notes`, printed as
a run warning).

Examples:
    >>> budgets = start_budgets(ray, suite, holder="nightly-42")       # doctest: +SKIP
    >>> budgets.renew()     # the driver's loop, every few seconds     # doctest: +SKIP
    >>> stop_budgets(ray, budgets)                                      # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalkit.corpus.suite import Suite
from evalkit.errors import ProviderError
from evalkit.run.engines.budget import BudgetLimits, RateBudget, acquire_remote, budget_name
from evalkit.run.providers import api_key_for

if TYPE_CHECKING:
    # Ray is imported lazily and handed around as a module object (a module is not a type).
    from types import ModuleType as ray_module

NAMESPACE = "evalkit"
#: How long a worker keeps asking a budget actor that is unavailable (restarting, recreated).
BUDGET_PATIENCE_S = 60.0
#: How often a driver renews its hold on its budgets (recreating one that vanished).
HEARTBEAT_S = 2.0
#: What Ray raises when an actor is gone for good or for now (with ValueError: no such name).
_GONE = ("RayActorError", "ActorDiedError", "ActorUnavailableError")


def _is_gone(ray: ray_module, exc: BaseException) -> bool:
    if isinstance(exc, ValueError):  # get_actor: no actor of that name (yet)
        return True
    kinds = tuple(getattr(ray.exceptions, n) for n in _GONE if hasattr(ray.exceptions, n))
    return isinstance(exc, kinds)


@dataclass
class Budgets:
    """A driver's hold on its endpoint's budget actors (none without ``rate_limit:``)."""

    ray: Any
    holder: str
    limits: BudgetLimits = field(default_factory=BudgetLimits)
    names: tuple[str, ...] = ()
    enforced: dict[str, BudgetLimits] = field(default_factory=dict)
    recreated: int = 0  # budgets this driver found gone and made again
    _renewed_at: float = 0.0

    @property
    def notes(self) -> tuple[str, ...]:
        """One line per budget whose enforced limits are not this run's own."""
        return tuple(
            f"rate budget {name} is shared with another run: it enforces {_shown(enforced)} "
            f"(the strictest of its runs), this run asked for {_shown(self.limits)}"
            for name, enforced in self.enforced.items()
            if enforced != self.limits
        )

    def renew(self, every_s: float = HEARTBEAT_S) -> None:
        """Heartbeat: join each budget again (at most every ``every_s``), recreating one that
        vanished."""
        if not self.names or time.monotonic() - self._renewed_at < every_s:
            return
        for name in self.names:
            try:
                self.enforced[name] = _join(self, name)
            except self.ray.exceptions.GetTimeoutError:
                continue  # busy or restarting: the next heartbeat tries again (ttl ≫ interval)
        self._renewed_at = time.monotonic()


def start_budgets(ray: ray_module, suite: Suite, holder: str | None = None) -> Budgets:
    """Join (creating when needed) the budget actor of the suite's endpoint as ``holder``
    (default: a fresh id for this call), on the head node."""
    limit = suite.config.rate_limit
    system = suite.config.system
    budgets = Budgets(ray, holder or f"driver-{secrets.token_hex(6)}")
    if limit is None or system.provider == "python":
        return budgets
    budgets.limits = BudgetLimits(
        limit.requests_per_minute, limit.tokens_per_minute, limit.max_in_flight
    )
    budgets.names = (budget_name(system.base_url, api_key_for(system)),)
    budgets.renew(every_s=0.0)
    return budgets


def stop_budgets(ray: ray_module, budgets: Budgets) -> None:
    """Leave each budget; the last holder to leave removes its actor."""
    for name in budgets.names:
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
            left = ray.get(actor.leave.remote(budgets.holder), timeout=30)
        except Exception as exc:
            if _is_gone(ray, exc):
                continue  # already gone: nothing to leave
            raise
        if left == 0:
            # Another driver may have joined since: its next heartbeat makes the actor again.
            with contextlib.suppress(ValueError):
                ray.kill(actor)


def _actor_class(ray: ray_module, name: str) -> Any:
    return ray.remote(RateBudget).options(
        name=name,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=-1,
        num_cpus=0,
        resources={"node:__internal_head__": 0.001},  # pinned to the head node
    )


def _join(budgets: Budgets, name: str) -> BudgetLimits:
    """Join ``name`` (creating it if no actor has that name); once more when it died between
    being found and being joined (the last other holder just removed it)."""
    ray, limits = budgets.ray, budgets.limits
    for attempt in range(3):
        existed = True
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            existed = False
            actor = _actor_class(ray, name).remote(
                limits.requests_per_minute, limits.tokens_per_minute, limits.max_in_flight
            )
        try:
            enforced = ray.get(
                actor.join.remote(
                    budgets.holder,
                    limits.requests_per_minute,
                    limits.tokens_per_minute,
                    limits.max_in_flight,
                ),
                timeout=30,
            )
        except Exception as exc:
            if attempt == 2 or not _is_gone(ray, exc):
                raise
            continue
        if not existed and budgets._renewed_at:
            budgets.recreated += 1  # it was there before: it vanished and is back
        return enforced
    raise AssertionError("unreachable")


class RayBudget:
    """A worker's async handle on a budget actor, asking again while it is unavailable (the
    driver's heartbeat recreates one that vanished)."""

    def __init__(self, ray: ray_module, name: str) -> None:
        self._ray = ray
        self._name = name
        self._actor: Any = None
        self._succeeded = False

    async def _call(self, method: str, *args: Any) -> Any:
        deadline = time.monotonic() + BUDGET_PATIENCE_S
        delay = 0.05
        while True:
            try:
                if self._actor is None:
                    self._actor = self._ray.get_actor(self._name, namespace=NAMESPACE)
                return await getattr(self._actor, method).remote(*args)
            except Exception as exc:
                if not _is_gone(self._ray, exc):
                    raise
                self._actor = None
                if time.monotonic() > deadline:
                    raise ProviderError(
                        f"rate budget {self._name} unavailable for {BUDGET_PATIENCE_S:g}s: "
                        f"{type(exc).__name__}",
                        retryable=True,
                    ) from None
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)

    async def acquire(self, tokens: int) -> int:
        async def ask() -> tuple[int | None, float]:
            succeeded, self._succeeded = self._succeeded, False  # told once, not per retry
            return await self._call("acquire", tokens, succeeded)

        return await acquire_remote(ask)

    async def release(self, lease: int | None, throttled: bool = False) -> None:
        await self._call("release", lease, throttled)

    async def backoff(self, retry_after_s: float | None) -> None:
        await self._call("backoff", retry_after_s)

    def succeeded(self) -> None:
        self._succeeded = True


def _shown(limits: BudgetLimits) -> str:
    parts = [
        f"{limits.requests_per_minute:g} requests/min" if limits.requests_per_minute else "",
        f"{limits.tokens_per_minute:g} tokens/min" if limits.tokens_per_minute else "",
        f"{limits.max_in_flight} in flight" if limits.max_in_flight else "",
    ]
    return ", ".join(p for p in parts if p) or "no limit"
