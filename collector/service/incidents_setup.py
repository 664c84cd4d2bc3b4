"""The incident engine as the service composes it: the rules read at start (``--rules``, ``--trigger``: a file with an
error refuses the start, naming its line), the watch over what is stored, and the HTTP session its webhooks go out on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ringtrace.collector.incidents.counts import IncidentCounts
from ringtrace.collector.incidents.engine import IncidentEngine, Viewer, Watch
from ringtrace.collector.incidents.frame_match import ACCELERATED
from ringtrace.collector.incidents.incident_store import IncidentStore
from ringtrace.collector.incidents.rule_file import load_rules
from ringtrace.collector.incidents.rules import RuleSet
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import Store
from ringtrace.wire.stream_limits import Limits

if TYPE_CHECKING:
    import aiohttp
    from ringtrace.collector.incidents.webhook import WebhookOutcome

__all__ = ["IncidentsSetup", "rule_set"]

log = logging.getLogger("ringtrace.collector")

#: What one step of the watch reads at most (the engine paces the steps: ``watch_pacing.py``):
#: in C most of a step runs without the GIL; in Python all of it holds it, so a step is kept short for the loop.
WATCH_STEP_BYTES: Final = 16 * 1024 * 1024 if ACCELERATED else 2 * 1024 * 1024


def rule_set(config: CollectorConfig) -> RuleSet:
    """The rules ``--rules`` and ``--trigger`` declare (none: an empty set).

    Raises:
        ConfigError: the file cannot be read, or a rule is wrong (``file:line`` and why).
    """
    if config.rules is None and not config.triggers:
        return RuleSet()
    return load_rules(Path(config.rules) if config.rules is not None else None, config.triggers or ())


class IncidentsSetup:
    """The engine over the collector's store, its rules checked now (``read_window``: see ``IncidentEngine``).

    Raises:
        ConfigError: as ``rule_set``.
    """

    def __init__(
        self,
        config: CollectorConfig,
        store: Store,
        registry: Registry,
        viewer: Viewer,
        files: IncidentStore,
        counts: IncidentCounts,
        stored_limits: Limits,
        read_window: Callable[[tuple[int, int], EventFilter], Awaitable[SnapshotView]] | None = None,
    ) -> None:
        self._config = config
        self._limits = stored_limits
        self._session: aiohttp.ClientSession | None = None
        self.engine = IncidentEngine(
            store,
            registry,
            viewer,
            files,
            rule_set(config),
            config.effective_incident_capacity_bytes,
            counts=counts,
            make_watch=self._watch,
            load_rules=lambda: rule_set(config),
            notify=self._notify,
            read_window=read_window,
        )

    def _watch(self, rules: RuleSet) -> Watch:
        from ringtrace.collector.incidents.watch import RuleWatch

        # Small steps: a step holds the GIL for stretches, and pins every stored segment while it runs.
        watch: Watch = RuleWatch(rules, self._limits, max_step_bytes=WATCH_STEP_BYTES)
        return watch

    async def start(self, fleet: bool) -> None:
        """Settle what a previous run left pending and watch the rules; say what is in force."""
        engine, config = self.engine, self._config
        rules = engine.rules.rules
        if rules:
            log.info(
                "incidents: %d rules (%s), windows kept within --incident-capacity %d bytes",
                len(rules),
                ", ".join(repr(rule.name) for rule in rules),
                config.effective_incident_capacity_bytes,
            )
        if fleet:
            log.info("incidents: with --jetstream, saved to %s: every collector on the stream lists and serves them",
                     engine.files.where)  # fmt: skip
        await engine.start()

    async def stop(self) -> None:
        await self.engine.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _notify(self, url: str, record: dict[str, Any]) -> WebhookOutcome:
        import aiohttp
        from ringtrace.collector.incidents.webhook import notify

        if self._session is None:
            self._session = aiohttp.ClientSession()
        return await notify(self._session, url, record)
