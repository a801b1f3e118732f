"""Deployment files for ``handoff run``: what is accepted, and what each mistake says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from handoff.core.errors import ConfigurationError
from handoff.deploy.deployment import load


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deployment.toml"
    path.write_text(text)
    return path


def test_a_deployment_with_env_counts_and_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVIEW_CREDENTIAL", "hsvc_x")
    found = load(
        _file(
            tmp_path,
            """
[env]
HANDOFF_SANDBOX_URL = "http://127.0.0.1:8900"

[[process]]
name = "review"
handoff = ["consume", "review_service:app"]
count = 2
env = { HANDOFF_CONSUMER_CREDENTIAL = "${REVIEW_CREDENTIAL}" }

[[process]]
name = "mailer"
exec = ["node", "mailer.js"]
restart = "always"
""",
        )
    )
    review, mailer = found.process
    assert (review.count, review.restart, mailer.restart) == (2, "on-failure", "always")
    assert review.env == {"HANDOFF_CONSUMER_CREDENTIAL": "hsvc_x"}
    assert found.env["HANDOFF_SANDBOX_URL"] == "http://127.0.0.1:8900"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[[process]]\nname = 'a'\n", "exactly one of handoff"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay']\nexec = ['x']\n", "exactly one of"),
        ("[[process]]\nname = 'A b'\nhandoff = ['relay']\n", "process.0.name"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay']\ncount = 0\n", "count"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay']\nrestart = 'sometimes'\n", "restart"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay']\ncolour = 'red'\n", "colour"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay']\n[[process]]\nname = 'a'\nexec = ['x']\n",
         "unique: a"),
        ("process = []\n", "no [[process]]"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay']\nenv = { X = '${NOT_SET_ANYWHERE}' }\n",
         "NOT_SET_ANYWHERE"),
        ("[[process]\n", "not valid TOML"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay', '--metrics-port', '9400']\ncount = 2\n"
         "[[process]]\nname = 'b'\nhandoff = ['consume', 'x:app', '--metrics-port=9401']\n",
         "a.2 and b would both listen on port 9401 (--metrics-port)"),
        ("[[process]]\nname = 'api'\nhandoff = ['serve', '--port', '9400']\n"
         "[[process]]\nname = 'relay'\nhandoff = ['relay', '--metrics-port', '9400']\n",
         "api and relay would both listen on port 9400"),
        ("[[process]]\nname = 'a'\nhandoff = ['relay', '--metrics-port', '65535']\ncount = 2\n",
         "a.2's --metrics-port would be 65536"),
    ],
)  # fmt: skip
def test_mistakes_are_refused_with_what_to_fix(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says)):
        load(_file(tmp_path, text))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load(tmp_path / "nope.toml")


def test_copies_listen_on_consecutive_ports(tmp_path: Path) -> None:
    found = load(
        _file(
            tmp_path,
            """
[[process]]
name = "review"
handoff = ["consume", "review:app", "--metrics-port", "9400", "--metrics-host", "0.0.0.0"]
count = 3

[[process]]
name = "api"
handoff = ["serve", "--port=18600", "--metrics-port", "0"]
count = 2

[[process]]
name = "mailer"
exec = ["node", "mailer.js", "--port", "9400"]
count = 2
""",
        )
    )
    review, api, mailer = found.process
    assert [review.label(n) for n in range(3)] == ["review.1", "review.2", "review.3"]
    assert review.command(2) == ["consume", "review:app", "--metrics-port", "9402",
                                 "--metrics-host", "0.0.0.0"]  # fmt: skip
    assert [port for n in range(3) for _, port in review.ports(n)] == [9400, 9401, 9402]
    assert review.ports(0) == [("--metrics-port", 9400)]
    # The inline form moves too; 0 (any free port) stays 0 and is nobody's port.
    assert api.command(1) == ["serve", "--port=18601", "--metrics-port", "0"]
    assert api.ports(1) == [("--port", 18601)]
    # Another program's arguments are its own: as written, and not checked.
    assert mailer.command(1) == ["node", "mailer.js", "--port", "9400"]
    assert mailer.ports(1) == []
    assert found.process[0].handoff == ["consume", "review:app", "--metrics-port", "9400",
                                        "--metrics-host", "0.0.0.0"]  # fmt: skip


def test_copies_are_static_members_each_of_its_own(tmp_path: Path) -> None:
    # One static id in two copies: each restart would take it from the other.
    found = load(
        _file(
            tmp_path,
            """
[[process]]
name = "review"
handoff = ["consume", "review:app", "--instance-id", "review-1"]
count = 2

[[process]]
name = "routing"
handoff = ["consume", "routing:app", "--instance-id=routing"]
count = 2
env = { HANDOFF_CONSUMER_INSTANCE_ID = "routing-env" }

[[process]]
name = "alone"
handoff = ["consume", "alone:app", "--instance-id", "alone-1"]
env = { HANDOFF_CONSUMER_INSTANCE_ID = "alone-env" }
""",
        )
    )
    review, routing, alone = found.process
    assert review.command(0)[-1] == "review-1.1" and review.command(1)[-1] == "review-1.2"
    assert routing.command(1)[-1] == "--instance-id=routing.2"
    assert routing.environment(1) == {"HANDOFF_CONSUMER_INSTANCE_ID": "routing-env.2"}
    assert routing.env == {"HANDOFF_CONSUMER_INSTANCE_ID": "routing-env"}  # the file's
    # One process keeps the id it was given.
    assert alone.command(0)[-1] == "alone-1"
    assert alone.environment(0) == {"HANDOFF_CONSUMER_INSTANCE_ID": "alone-env"}
