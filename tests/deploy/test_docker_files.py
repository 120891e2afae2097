"""The deployment files, checked without Docker (there is none on the development machines):
docker-compose.yml, the Dockerfile, the deployed dagster.yaml and workspace.yaml, .env.example.
test_postgres_instance.py runs the deployed dagster.yaml against a real PostgreSQL server."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
SERVICES = ("postgres", "code", "webserver", "daemon")
DAGSTER_SERVICES = ("code", "webserver", "daemon")
DAGSTER_HOME = "/opt/dagster/home"
WORKSPACE_IN_IMAGE = "/opt/dagster/app/docker/workspace.yaml"
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|TOKEN|API_KEY|_KEY|WEBHOOK_URL)$")  # a webhook URL holds a token
# ${VAR}, ${VAR:?message}, ${VAR?message}, ${VAR:-} / ${VAR-} (empty default): no value written here.
SECRET_REFERENCE = re.compile(r"^\$\{(?P<name>[A-Z0-9_]+)(:?\?[^}]*|:?-)?\}$")
REFERENCE = re.compile(r"(?<!\$)\$\{([A-Z0-9_]+)")  # $${X} is a literal ${X} for the container shell


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def _dockerfile_env(text: str) -> dict[str, str]:
    """ENV key=value pairs of the Dockerfile (line continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    env: dict[str, str] = {}
    for line in joined.splitlines():
        if line.startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return env


def _volumes(service: dict) -> dict[str, str]:
    """container path -> source of the service's short-syntax volumes."""
    out = {}
    for entry in service.get("volumes", []):
        source, target, *_ = entry.split(":")
        out[target] = source
    return out


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _strings(node) -> list[str]:
    """Every string value (and key) of a parsed YAML document."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def _readme_configuration_variables() -> set[str]:
    """MEDDEVKG_* names in the first column of the top-level README's configuration table."""
    names = set()
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("| `MEDDEVKG_"):
            names.update(re.findall(r"MEDDEVKG_[A-Z_]+", line.split("|")[1]))
    assert names, "README.md has no configuration table"
    return names


def test_services_have_healthchecks_and_volumes(compose):
    services = compose["services"]
    assert set(SERVICES) <= set(services)
    for name in SERVICES:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert services[name].get("volumes"), f"{name} mounts no volume"
    declared = set(compose["volumes"])
    for name in SERVICES:
        for target, source in _volumes(services[name]).items():
            if source.startswith("."):
                assert (DOCKER / source).is_file(), f"{name} mounts {source}, which is missing"
            else:
                assert source in declared, f"{name} mounts undeclared volume {source} at {target}"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "/var/lib/postgresql/data" in _volumes(services["postgres"])


def test_commands_and_health_checks(compose):
    services = compose["services"]
    code = services["code"]
    assert code["command"] == ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "4000",
                               "-m", "meddevkg_dagster.definitions"]
    assert code["healthcheck"]["test"] == ["CMD", "dagster", "api", "grpc-health-check", "-p", "4000"]
    assert services["webserver"]["command"] == ["dagster-webserver", "-h", "0.0.0.0", "-p", "3000",
                                                "-w", WORKSPACE_IN_IMAGE]
    assert services["daemon"]["command"][:2] == ["dagster-daemon", "run"]
    assert services["daemon"]["command"][2:] == ["-w", WORKSPACE_IN_IMAGE]
    for name in ("webserver", "daemon"):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["code"]["condition"] == "service_healthy"
    assert services["code"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert any(port.endswith(":3000") for port in services["webserver"]["ports"])


def test_dagster_services_use_the_deployed_instance_and_workspace(compose, dockerfile):
    services = compose["services"]
    assert _dockerfile_env(dockerfile)["DAGSTER_HOME"] == DAGSTER_HOME
    for name in DAGSTER_SERVICES:
        volumes = _volumes(services[name])
        assert volumes[f"{DAGSTER_HOME}/dagster.yaml"] == "./dagster.yaml", name
        assert _environment(services[name])["DAGSTER_HOME"] == DAGSTER_HOME
        env = _environment(services[name])
        for var in ("USER", "PASSWORD", "DB", "HOST", "PORT"):
            assert f"DAGSTER_POSTGRES_{var}" in env, f"{name} lacks DAGSTER_POSTGRES_{var}"
    for name in ("webserver", "daemon"):
        assert _volumes(services[name])[WORKSPACE_IN_IMAGE] == "./workspace.yaml"
        assert _environment(services[name])["DAGSTER_CODE_SERVER_HOST"] == "${DAGSTER_CODE_SERVER_HOST:-code}"
    # The image carries the same files, so the services also work without the bind mounts.
    assert "COPY docker ./docker" in dockerfile
    assert 'cp docker/dagster.yaml "${DAGSTER_HOME}/dagster.yaml"' in dockerfile


def test_code_server_volumes_hold_the_warehouse_and_the_embedding_cache(compose, dockerfile):
    env = _dockerfile_env(dockerfile)
    volumes = _volumes(compose["services"]["code"])
    assert volumes[env["MEDDEVKG_HOME"]] == "meddevkg_home"
    assert volumes[env["MEDDEVKG_EMBEDDING_CACHE"]] == "embedding_cache"
    assert volumes[f"{DAGSTER_HOME}/storage"] == "dagster_storage"
    for path in (env["MEDDEVKG_HOME"], env["MEDDEVKG_EMBEDDING_CACHE"], f"{DAGSTER_HOME}/storage"):
        assert path in dockerfile.split("VOLUME", 1)[1], f"{path} is not declared as a VOLUME"


def test_no_secret_is_hard_coded(compose, dockerfile):
    """Secrets reach the containers only as ${VAR} from docker/.env, never as values in the files."""
    checked = 0
    for name, service in compose["services"].items():
        for key, value in _environment(service).items():
            if SECRET_NAME.search(key):
                assert SECRET_REFERENCE.match(value), f"{name}: {key} must be a ${{VAR}} reference, got {value!r}"
                checked += 1
        for key in service.get("build", {}).get("args") or {}:
            assert not SECRET_NAME.search(key), f"{name}: secret {key} passed as a build arg (baked into the image)"
    assert checked >= 4  # the Postgres password (postgres, code, webserver, daemon) and the API keys
    for line in dockerfile.splitlines():
        if line.startswith(("ENV", "ARG")):
            assert not SECRET_NAME.search(line.split()[1].split("=")[0]), f"secret in the Dockerfile: {line}"
    assert "PASSWORD" not in dockerfile and "API_KEY" not in dockerfile
    # The committed template leaves every secret empty, and the real .env stays out of git and the image.
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            if SECRET_NAME.search(key):
                assert value == "", f".env.example sets {key}"
    assert ".env" in (DOCKER / ".gitignore").read_text().split()
    assert "docker/.env" in (DOCKER / "Dockerfile.dockerignore").read_text().split()


def test_every_setting_reaches_the_code_server(compose, dockerfile):
    """Each MEDDEVKG_* of the README's configuration table is passed from .env or fixed by the image."""
    code_env = _environment(compose["services"]["code"])
    image_env = _dockerfile_env(dockerfile)
    for name in sorted(_readme_configuration_variables()):
        if name in image_env:
            assert name not in code_env, f"{name} is fixed by the image (a volume path); do not override it"
        else:
            assert code_env.get(name, "").startswith(f"${{{name}"), f"{name} is not passed to the code server"


def test_every_variable_is_documented(compose):
    """Each ${VAR} the compose file reads is in .env.example and in docker/README.md."""
    used = {name for value in _strings(compose) for name in REFERENCE.findall(value)}
    template = (DOCKER / ".env.example").read_text()
    readme = (DOCKER / "README.md").read_text()
    assert {"DAGSTER_POSTGRES_USER", "DAGSTER_POSTGRES_PASSWORD", "DAGSTER_POSTGRES_DB"} <= used
    for name in sorted(used):
        assert re.search(rf"^#?\s*{name}=", template, re.M), f"{name} is not in .env.example"
        assert name in readme, f"{name} is not documented in docker/README.md"


def test_the_deployment_batches_asset_events_like_the_local_instance(compose):
    from meddevkg_dagster.event_log import EVENT_SETTINGS

    for name, value in EVENT_SETTINGS.items():
        for service in ("code", "webserver", "daemon"):
            assert _environment(compose["services"][service]).get(name) == f"${{{name}:-{value}}}", (name, service)


def test_deployed_instance_uses_postgres_from_env_and_the_local_run_queue_limits():
    from dagster._config import validate_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster_postgres.utils import pg_config

    deployed = yaml.safe_load((DOCKER / "dagster.yaml").read_text())
    local = yaml.safe_load((REPO / "dagster.yaml").read_text())
    db = deployed["storage"]["postgres"]["postgres_db"]
    assert {k: v for k, v in db.items() if k != "scheme"} == {
        "username": {"env": "DAGSTER_POSTGRES_USER"}, "password": {"env": "DAGSTER_POSTGRES_PASSWORD"},
        "hostname": {"env": "DAGSTER_POSTGRES_HOST"}, "db_name": {"env": "DAGSTER_POSTGRES_DB"},
        "port": {"env": "DAGSTER_POSTGRES_PORT"}}
    # dagster-postgres installs psycopg2; SQLAlchemy 2.1 maps a bare postgresql:// URL to psycopg 3.
    assert db["scheme"] == "postgresql+psycopg2"
    assert deployed["run_coordinator"] == {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"}
    assert deployed["concurrency"] == local["concurrency"]
    # No run carries the steps' meddevkg/gpu tag, so a run-level limit on it would do nothing.
    assert "tag_concurrency_limits" not in deployed["concurrency"]["runs"]
    assert deployed["concurrency"]["pools"]["default_limit"] == 1
    # Dagster's own validation of both files (the env references are not resolved here).
    for directory in (DOCKER, REPO):
        dagster_instance_config(str(directory), "dagster.yaml")
    assert validate_config(pg_config(), deployed["storage"]["postgres"]).success


def test_workspace_points_at_the_code_server(compose, monkeypatch):
    from dagster._core.workspace.config_schema import ensure_workspace_config

    workspace = yaml.safe_load((DOCKER / "workspace.yaml").read_text())
    monkeypatch.setenv("DAGSTER_CODE_SERVER_HOST", "code")  # as the compose file sets it
    resolved = ensure_workspace_config(workspace, str(DOCKER / "workspace.yaml"))
    assert resolved["load_from"][0]["grpc_server"]["host"] == "code"
    (location,) = workspace["load_from"]
    server = location["grpc_server"]
    assert server["host"] == {"env": "DAGSTER_CODE_SERVER_HOST"}
    assert "code" in compose["services"]  # the default host the compose file sets
    code_port = compose["services"]["code"]["command"][compose["services"]["code"]["command"].index("-p") + 1]
    assert server["port"] == int(code_port) == 4000
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert server["location_name"] == pyproject["tool"]["dagster"]["code_location_name"] == "meddevkg"


def test_dockerfile_pins_torch_then_installs_the_extra(dockerfile):
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    (torch_pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("torch")]
    assert torch_pin == "torch==2.13.0"
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.M)
    assert re.search(r"^ARG EXTRA=cpu$", dockerfile, re.M)
    assert set(pyproject["project"]["optional-dependencies"]) >= {"cpu", "gpu"}
    torch_at = dockerfile.index('"torch==2.13.0"')
    project_at = dockerfile.index('pip install -c constraints.txt ".[${EXTRA}]"')
    assert torch_at < project_at, "torch must be installed (pinned) before the project"
    env = _dockerfile_env(dockerfile)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["DAGSTER_HOME"] == DAGSTER_HOME and env["MEDDEVKG_HOME"]
    users = re.findall(r"^USER (\S+)$", dockerfile, re.M)
    assert users and users[-1] not in ("root", "0"), "the image must run as a non-root user"
    assert dockerfile.rindex("USER ") < dockerfile.index("CMD ")


def test_dagster_postgres_is_a_pinned_dependency():
    import dagster_postgres

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "dagster-postgres==0.29.27" in deps
    assert dagster_postgres.__version__ == "0.29.27"


def test_the_image_installs_the_dependencies_before_it_copies_the_code(dockerfile, tmp_path):
    # A code change rebuilt the layer that installed every package (torch aside).
    import subprocess
    import sys

    script = DOCKER / "requirements_of.py"
    out = subprocess.run([sys.executable, str(script), str(REPO / "pyproject.toml"), "cpu,k8s"], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert [line for line in out if line] == [*project["dependencies"], *extras["cpu"], *extras["k8s"]]
    wrong = subprocess.run([sys.executable, str(script), str(REPO / "pyproject.toml"), "cpu,kube"],
                           capture_output=True, text=True)
    assert wrong.returncode != 0 and "unknown extra(s) ['kube']" in wrong.stderr
    assert "docker/requirements_of.py" in dockerfile.split("COPY meddevkg_core")[0]
    deps_at = dockerfile.index("pip install -c constraints.txt -r /tmp/requirements.txt")
    assert dockerfile.index('"torch==2.13.0"') < deps_at < dockerfile.index("COPY meddevkg_core")


def _copy_sources(dockerfile: str) -> list[tuple[int, list[str]]]:
    """(offset in the Dockerfile, source paths) of each COPY, in build order."""
    return [(m.start(), m.group(1).split()[:-1]) for m in re.finditer(r"^COPY (.+)$", dockerfile, re.M)]


def test_the_dependency_layer_copies_only_what_the_install_reads(dockerfile):
    # README.md was copied before the dependency install: editing it reinstalled every package.
    deps_at = dockerfile.index("pip install -c constraints.txt -r /tmp/requirements.txt")
    before = {s for at, sources in _copy_sources(dockerfile) if at < deps_at for s in sources}
    assert before == {"pyproject.toml", "constraints.txt", "requirements-mpnet.txt", "docker/requirements_of.py"}
    ignored = [line for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
               if line and not line.startswith("#")]
    project_at = dockerfile.index('pip install -c constraints.txt ".[${EXTRA}]"')
    for at, sources in _copy_sources(dockerfile):
        for source in sources:
            assert (REPO / source).exists(), f"the Dockerfile copies {source}, which is missing"
            assert not [p for p in ignored if fnmatch(source, p) or source.startswith(f"{p}/")], source
            if source in ("README.md", "meddevkg_core", "meddevkg_dagster"):  # the wheel's inputs
                assert deps_at < at < project_at, f"{source} must be copied between the two installs"


def test_a_cpu_install_pulls_no_nvidia_package():
    # xgboost's Linux wheel pulled NVIDIA's NCCL (470 MB) into every CPU install; the cpu extra takes
    # xgboost-cpu. With no NVIDIA pin in the CPU freeze, a gpu install takes them from torch's CUDA build.
    frozen = [line.lower() for line in (REPO / "constraints.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    assert not [line for line in frozen if line.startswith("nvidia-")]
    assert "xgboost-cpu==3.2.0" in frozen and not [line for line in frozen if line.startswith("xgboost==")]


def test_the_gpu_extra_is_the_cpu_extras_faiss_and_xgboost_built_for_cuda():
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    cpu = {Requirement(s).name: str(Requirement(s).specifier) for s in extras["cpu"]}
    gpu = {Requirement(s).name: str(Requirement(s).specifier) for s in extras["gpu"]}
    assert cpu == {"faiss-cpu": "==1.15.1", "xgboost-cpu": "==3.2.0"}
    assert gpu == {"faiss-gpu": "==1.15.1", "xgboost": "==3.2.0"}
    # in an extra only: beside xgboost-cpu, a plain dependency would install both builds of one module
    assert not [d for d in project["dependencies"] if Requirement(d).name.startswith(("xgboost", "faiss"))]
