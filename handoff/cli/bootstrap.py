"""The composition root: what each long-running ``handoff`` process is made of.

One function per kind of process builds its settings, its connections and
its collaborators from the environment (``HANDOFF_*`` and the local stack's
env file), as cosmicpython's ``bootstrap.py`` does. The commands only parse
their options and run what these return; tests build the same objects with
the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handoff.core.errors import ConfigurationError
from handoff.core.settings import HandoffSettings, load_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from handoff.consumers.app import Consumer
    from handoff.consumers.executor import Executors
    from handoff.consumers.runtime import Runtime
    from handoff.relay.relay import Relay
    from handoff.tracker.settings import TrackerSettings


def settings() -> HandoffSettings:
    """Where the running parts are: the one read of HANDOFF_* every process makes."""
    return load_settings()


def load_app(target: str) -> Consumer:
    """The ``Consumer`` named by ``MODULE:APP`` (``handoff consume`` and friends); the
    current folder is importable, as for ``python -m``."""
    import importlib
    import sys
    from pathlib import Path

    from handoff.consumers.app import Consumer

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"{target!r}: expected MODULE:APP, e.g. myservice.consumers:app")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name}: {exc}") from exc
    found = getattr(module, attr, None)
    if not isinstance(found, Consumer):
        raise ConfigurationError(
            f"{target} is {type(found).__name__}, not a handoff.consumers.Consumer"
        )
    return found


@dataclass
class ConsumerProcess:
    """A consumer and, when its app declares effects, the executors beside it."""

    runtime: Runtime
    executors: Executors | None

    def run(self, idle_exit_s: float | None = None) -> int:
        if self.executors is not None:
            self.executors.start()
        try:
            return self.runtime.run(idle_exit_s=idle_exit_s)
        finally:
            if self.executors is not None:
                self.executors.stop()

    def stop(self) -> None:
        self.runtime.stop()


def consumer(target: str, overrides: dict[str, Any], executors: int | None) -> ConsumerProcess:
    from handoff.consumers.runtime import Runtime
    from handoff.consumers.settings import ConsumerSettings

    found = settings()
    config = ConsumerSettings(**{k: v for k, v in overrides.items() if v is not None})
    app = load_app(target)
    workers = effect_executors(app, executors, found) if app.effects else None
    return ConsumerProcess(Runtime(app, found, config), workers)


def effect_executors(
    app: Consumer, count: int | None, found: HandoffSettings | None = None
) -> Executors:
    from handoff.consumers.executor import Executors
    from handoff.consumers.settings import EffectSettings

    config = EffectSettings.with_executors(count)
    return Executors(app, (found or settings()).database_url, config)


def relay() -> Relay:
    from handoff.relay.relay import Relay
    from handoff.relay.settings import RelaySettings

    return Relay(settings(), RelaySettings())


def tracker(
    found: HandoffSettings | None = None, *, pool_size: int = 16
) -> tuple[FastAPI, TrackerSettings]:
    """The tracker's application and the settings its server runs with; it serves the
    AsyncAPI document of the topics as this deployment's relays publish them."""
    from handoff.relay import asyncapi
    from handoff.relay.settings import RelaySettings
    from handoff.tracker.app import create_app
    from handoff.tracker.settings import TrackerSettings

    found = found or settings()
    tracker_settings = TrackerSettings()
    topics = asyncapi.as_yaml(asyncapi.document(found, RelaySettings()))
    app = create_app(found, pool_size=pool_size, tracker=tracker_settings, topics_document=topics)
    return app, tracker_settings
