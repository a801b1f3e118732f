"""``handoff run``: real processes, one view, restarts, and Ctrl-C stopping them in order."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from handoff.stack.layout import pick_port, port_is_free
from handoff.stack.procs import wait_until
from tests.fix_contract import answers_healthz

TALKER = "import os,time\nwhile True:\n print('tick', os.environ['HANDOFF_RUN_PROCESS'], flush=True); time.sleep(0.2)"  # noqa: E501
CRASHER = "import time,sys; print('up', flush=True); time.sleep(0.3); sys.exit(3)"
STUBBORN = "import signal,time\nsignal.signal(signal.SIGTERM, lambda *_: None)\nprint('stubborn', flush=True)\nwhile True: time.sleep(1)"  # noqa: E501


def test_run_supervises_restarts_and_stops_in_reverse_order(tmp_path: Path) -> None:
    port = pick_port(18950, set())
    file = tmp_path / "deployment.toml"
    file.write_text(_toml(port, tmp_path))
    with _running(file, tmp_path) as (proc, out):

        def restarted() -> bool:
            text = out.read_text()
            return "crasher: exited with 3" in text and text.count("crasher: started") >= 2

        assert wait_until(restarted, 20), out.read_text()
        # The sandbox is started with the others but may not listen yet on a slow machine.
        assert wait_until(lambda: answers_healthz(f"http://127.0.0.1:{port}"), 20), out.read_text()
        children = psutil.Process(proc.pid).children()
        assert len(children) >= 4
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(30) == 0
    text = out.read_text()
    assert "talker.1 | tick talker.1" in text and "talker.2 | tick talker.2" in text
    assert "sandbox | " in text
    notes = [line.split("|", 1)[1].strip() for line in text.splitlines()
             if line.strip().startswith("run |")]  # fmt: skip
    stops = [note for note in notes if note.endswith(": stopping")]
    order = [s.split(":")[0] for s in stops]
    assert order[0] == "stubborn" and order[-1] == "sandbox"
    assert order.index("talker.2") < order.index("talker.1")
    assert "stubborn: still running after 1 s; killed" in text
    for child in children:
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert (tmp_path / "run-talker.1.log").read_text().startswith("tick talker.1")


@contextmanager
def _running(file: Path, folder: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``handoff run file`` with its view in ``folder/out.log``; killed if still running."""
    out = folder / "out.log"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "handoff.cli", "run", str(file), "--logs", str(folder)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _toml(port: int, folder: Path) -> str:
    def arr(*items: str) -> str:
        return "[" + ", ".join(_quote(i) for i in items) + "]"

    return "\n".join([
        "[[process]]", 'name = "sandbox"',
        f"handoff = {arr('sandbox-provider', '--port', str(port), '--data', str(folder / 'sb'))}",
        "[[process]]", 'name = "talker"', f"exec = {arr(sys.executable, '-c', TALKER)}",
        "count = 2",
        "[[process]]", 'name = "crasher"', f"exec = {arr(sys.executable, '-c', CRASHER)}",
        "[[process]]", 'name = "stubborn"', f"exec = {arr(sys.executable, '-c', STUBBORN)}",
        "stop_timeout_s = 1",
    ])  # fmt: skip


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def test_processes_end_when_handoff_run_is_killed(tmp_path: Path) -> None:
    file = tmp_path / "deployment.toml"
    file.write_text(
        "\n".join(
            [
                "[[process]]",
                'name = "talker"',
                f'exec = [{_quote(sys.executable)}, "-c", {_quote(TALKER)}]',
            ]
        )
    )
    with _running(file, tmp_path) as (proc, out):
        assert wait_until(lambda: "tick talker" in out.read_text(), 20), out.read_text()
        [child] = psutil.Process(proc.pid).children()
        proc.kill()  # SIGKILL: no chance to stop anything in order
        proc.wait(10)
        assert wait_until(lambda: not child.is_running(), 10)


def test_only_the_named_processes_run_with_variables_from_an_env_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.env"
    secret.write_text("# written by a setup step\nGREETING=hello from the env file\n")
    say = "import os\nprint(os.environ['SAID'], flush=True)"
    file = tmp_path / "deployment.toml"
    python = _quote(sys.executable)
    file.write_text("\n".join([
        "[[process]]", 'name = "talker"', f'exec = [{python}, "-c", {_quote(say)}]',
        'env = { SAID = "${GREETING}" }',
        "[[process]]", 'name = "other"', f'exec = [{python}, "-c", {_quote(TALKER)}]',
    ]))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "run", str(file), "--logs", str(tmp_path),
         "--only", "talker", "--env-file", str(secret), "--for", "2"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "talker | hello from the env file" in done.stdout, done.stdout + done.stderr
    assert "other" not in done.stdout
    unknown = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "run", str(file), "--only", "nobody",
         "--env-file", str(secret)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert unknown.returncode != 0 and "the file has talker, other" in unknown.stderr


def test_copies_of_a_process_listen_on_consecutive_ports(tmp_path: Path) -> None:
    tried: set[int] = set()
    port = pick_port(18960, tried)
    while not port_is_free(port + 1):  # the second copy's port must be free too
        tried.add(port)
        port = pick_port(18960, tried)
    file = tmp_path / "deployment.toml"
    args = ["sandbox-provider", "--port", str(port), "--data", str(tmp_path / "sb")]
    file.write_text("\n".join([
        "[[process]]", 'name = "sandbox"', f"handoff = [{', '.join(_quote(a) for a in args)}]",
        "count = 2",
    ]))  # fmt: skip
    with _running(file, tmp_path) as (proc, out):
        for copy in (port, port + 1):
            url = f"http://127.0.0.1:{copy}"
            assert wait_until(lambda u=url: answers_healthz(u), 20), out.read_text()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    text = out.read_text()
    # Neither copy failed to bind and was restarted.
    assert "restarting" not in text and "Address already in use" not in text, text
    assert f"sandbox.2 | http://127.0.0.1:{port + 1}" in text
