"""A deployment file: which processes run, how many of each, with what settings.

    # deployment.toml  (handoff run deployment.toml)
    [env]                                   # for every process
    HANDOFF_SANDBOX_URL = "http://127.0.0.1:8900"

    [[process]]
    name = "relay"
    handoff = ["relay", "--metrics-port", "9400"]   # a handoff command ...

    [[process]]
    name = "review"
    handoff = ["consume", "review_service:app"]
    count = 2
    env = { HANDOFF_CONSUMER_CREDENTIAL = "${REVIEW_CREDENTIAL}" }

    [[process]]
    name = "mailer"
    exec = ["node", "mailer.js"]             # ... or any program
    restart = "always"

Processes start in file order and stop in the reverse order. ``${NAME}`` in
an env value is taken from the environment of ``handoff run`` (so secrets
stay out of the file); a missing one is an error naming it. The copies of a
handoff command listen on consecutive ports from the one it gives (review.1
on 9400, review.2 on 9401 for ``--metrics-port 9400``), and are static group
members of their own (``--instance-id review`` or HANDOFF_CONSUMER_INSTANCE_ID:
review.1, review.2); a port two processes would both listen on is an error
naming them.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from handoff.core.errors import ConfigurationError

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# The options by which a handoff command names a port it listens on (serve,
# sandbox-provider; every long-running command's metrics). Why copies move up:
# with count = 2 both copies would otherwise bind the same port, and the
# second would fail and be restarted for ever.
PORT_OPTIONS = ("--port", "--metrics-port")
# A consumer's static group membership, as an option and as a setting.
INSTANCE_OPTION = "--instance-id"
INSTANCE_ENV = "HANDOFF_CONSUMER_INSTANCE_ID"


class ProcessSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    handoff: list[str] | None = None
    exec: list[str] | None = None
    count: Annotated[int, Field(ge=1, le=64)] = 1
    restart: Literal["always", "on-failure", "never"] = "on-failure"
    env: dict[str, str] = {}
    stop_timeout_s: Annotated[float, Field(gt=0, le=600)] = 15.0

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("1-40 of a-z, 0-9, _ and -, starting with a letter")
        return value

    @model_validator(mode="after")
    def _one_command(self) -> ProcessSpec:
        if (self.handoff is None) == (self.exec is None):
            raise ValueError("give exactly one of handoff = [...] or exec = [...]")
        if not (self.handoff or self.exec):
            raise ValueError("the command is empty")
        return self

    def label(self, copy: int) -> str:
        """How copy ``copy`` (from 0) is named in the view and its log: review, or review.2."""
        return self.name if self.count == 1 else f"{self.name}.{copy + 1}"

    def command(self, copy: int) -> list[str]:
        """Copy ``copy``'s arguments: a handoff command's ports moved up by ``copy`` (0,
        any free port, stays 0) and, among several copies, its static member id made its
        own; an exec command as written."""
        if self.handoff is None:
            assert self.exec is not None
            return list(self.exec)
        args = list(self.handoff)
        for at, option, given in _options(args, (*PORT_OPTIONS, INSTANCE_OPTION)):
            own = given
            if option == INSTANCE_OPTION:
                own = self._instance(given, copy)
            elif given.isdigit() and int(given) > 0:
                own = str(int(given) + copy)
            inline = f"{option}=" if args[at].startswith(f"{option}=") else ""
            args[at] = f"{inline}{own}"
        return args

    def environment(self, copy: int) -> dict[str, str]:
        """Copy ``copy``'s own env: among several copies, its static member id its own."""
        env = dict(self.env)
        if INSTANCE_ENV in env:
            env[INSTANCE_ENV] = self._instance(env[INSTANCE_ENV], copy)
        return env

    def _instance(self, value: str, copy: int) -> str:
        # Two members of one group with one static id fence each other out by
        # turns (each restart takes the id from the other): review-1 becomes
        # review-1.1, review-1.2 when there are two copies.
        return value if self.count == 1 else f"{value}.{copy + 1}"

    def ports(self, copy: int) -> list[tuple[str, int]]:
        """The ports copy ``copy`` listens on, with the option naming each."""
        if self.handoff is None:
            return []
        return [(option, int(given) + copy) for _, option, given
                in _options(self.handoff, PORT_OPTIONS)
                if given.isdigit() and int(given) > 0]  # fmt: skip


def _options(args: list[str], names: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """Where a command's arguments give one of the options ``names``: the index of the
    argument holding the value (``--port 9400`` or ``--port=9400``), the option, the value."""
    found = []
    for n, arg in enumerate(args):
        option, inline, value = arg.partition("=")
        at = n if inline else n + 1
        if option not in names or at >= len(args):
            continue
        found.append((at, option, value if inline else args[at]))
    return found


class Deployment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: dict[str, str] = {}
    process: list[ProcessSpec]

    @model_validator(mode="after")
    def _unique(self) -> Deployment:
        names = [p.name for p in self.process]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"process names must be unique: {', '.join(twice)}")
        if not names:
            raise ValueError("no [[process]] to run")
        return self

    @model_validator(mode="after")
    def _ports_apart(self) -> Deployment:
        taken: dict[int, str] = {}
        for spec in self.process:
            for copy in range(spec.count):
                for option, port in spec.ports(copy):
                    label = spec.label(copy)
                    if port > 65535:
                        raise ValueError(f"{label}'s {option} would be {port}, above 65535")
                    if port in taken:
                        raise ValueError(
                            f"{taken[port]} and {label} would both listen on port {port} "
                            f"({option}); the copies of a process listen on consecutive "
                            "ports from the one given"
                        )
                    taken[port] = label
        return self


def _expand(value: str, where: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigurationError(f"{where}: ${{{name}}} is not set in the environment")
        return os.environ[name]

    return VARIABLE.sub(one, value)


def load(path: Path) -> Deployment:
    """Read and check ``path``; every problem is a ConfigurationError saying what to fix."""
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from exc
    try:
        found = Deployment.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigurationError(f"{path}: {problems}") from exc
    found.env = {k: _expand(v, f"env.{k}") for k, v in found.env.items()}
    for spec in found.process:
        spec.env = {k: _expand(v, f"{spec.name}.env.{k}") for k, v in spec.env.items()}
    return found


def load_env_file(path: Path) -> None:
    """Put KEY=VALUE lines (``#`` comments, blank lines ignored) into the environment."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from exc
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            raise ConfigurationError(f"{path}:{number}: expected KEY=VALUE, got {line[:40]!r}")
        os.environ[key.strip()] = value.strip()


def only_processes(found: Deployment, names: list[str]) -> Deployment:
    """The deployment with only the named processes; an unknown name is an error."""
    known = [p.name for p in found.process]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ConfigurationError(
            f"--only: {', '.join(unknown) or 'no name given'}; the file has {', '.join(known)}"
        )
    return found.model_copy(update={"process": [p for p in found.process if p.name in names]})
