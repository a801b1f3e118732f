"""Deployment files for ``handoff run``: what is accepted, and what each mistake says."""

from __future__ import annotations

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
    ],
)  # fmt: skip
def test_mistakes_are_refused_with_what_to_fix(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says.replace("[", r"\[")):
        load(_file(tmp_path, text))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load(tmp_path / "nope.toml")
