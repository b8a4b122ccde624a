"""The cluster configurations, checked offline (no cloud call, no Ray started).

- ``cluster.yaml`` (AWS) and ``cluster.local.yaml`` (on-prem) pass Ray's own cluster-launcher
  schema, which rejects a mistyped key;
- xmr's conventions hold in them: Ray and MLflow listen on the head's private address, token
  authentication is on, every node installs xmr at a pinned ref (a commit, or the YOUR_COMMIT
  placeholder the header tells users to fill; a tag only if this repository has it), the node
  types are consistent;
- ``cluster.kuberay.yaml`` uses only the RayJob fields of KubeRay's CRD and has the ones it needs;
- the three files pin the same xmr ref and the same Ray version.
"""

from __future__ import annotations

import copy
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.runtime_env import RuntimeEnv

REPO = Path(__file__).parents[1]
AWS = "cluster.yaml"
ON_PREM = "cluster.local.yaml"
LAUNCHER_FILES = (AWS, ON_PREM)
KUBERAY = "cluster.kuberay.yaml"

PINNED_REF = re.compile(r"v\d+\.\d+\.\d+|[0-9a-f]{40}")
"""A release tag or a full commit id: refs that always name the same code (a branch does not)."""

REF_PLACEHOLDER = "YOUR_COMMIT"
"""What the files install until the user puts the commit of their own repository there."""

TAG = re.compile(r"\bv\d+\.\d+\.\d+\b|refs/tags/([^/\"\s<>]+?)\.zip")
"""A release tag named anywhere in a file (``v1.2.3``, a GitHub archive of a tag)."""

RAY_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
"""Resource names Ray defines itself; any other name in a node type is a custom resource."""


def load(name: str) -> dict[str, Any]:
    """A configuration file of the repository's root, parsed."""
    return yaml.safe_load((REPO / name).read_text())


def comments(name: str) -> str:
    """The text of a YAML file's comments (what a newcomer reads), one comment per line."""
    lines = (REPO / name).read_text().splitlines()
    return "\n".join(line.split("#", 1)[1] for line in lines if "#" in line)


def renamed(config: dict[str, Any], path: tuple[str, ...], new_key: str) -> dict[str, Any]:
    """A copy of ``config`` with the key at ``path`` renamed to ``new_key`` (a typo)."""
    copied = copy.deepcopy(config)
    parent = copied
    for key in path[:-1]:
        parent = parent[key]
    parent[new_key] = parent.pop(path[-1])
    return copied


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to resolve a host or open a connection fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access during an offline check: {args}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


# --- Ray's cluster-launcher schema -----------------------------------------------------------


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize("name", LAUNCHER_FILES)
def test_launcher_config_passes_rays_schema(name: str) -> None:
    validate_config(prepare_config(load(name)))


@pytest.mark.parametrize(
    ("name", "path", "typo"),
    [
        (AWS, ("max_workers",), "max_worker"),
        (AWS, ("available_node_types",), "available_node_type"),
        (AWS, ("available_node_types", "gpu_worker", "min_workers"), "min_worker"),
        (ON_PREM, ("max_workers",), "max_worker"),
        (ON_PREM, ("auth", "ssh_private_key"), "ssh_privat_key"),
        (ON_PREM, ("head_start_ray_commands",), "head_start_commands"),
    ],
)
@pytest.mark.usefixtures("no_network")
def test_launcher_schema_rejects_a_typo_key(name: str, path: tuple[str, ...], typo: str) -> None:
    config = renamed(load(name), path, typo)
    with pytest.raises(jsonschema.ValidationError, match=f"'{typo}' was unexpected"):
        validate_config(prepare_config(config))


# --- xmr's conventions in the launcher files -------------------------------------------------


def start_commands(config: dict[str, Any]) -> Iterator[str]:
    yield from config["head_start_ray_commands"]
    yield from config["worker_start_ray_commands"]


def flag_value(command: str, flag: str) -> str:
    """The value of ``--flag=value`` or ``--flag value`` in a command line."""
    found = re.search(rf"{flag}[= ](\S+)", command)
    assert found, f"{flag} missing in: {command}"
    return found.group(1)


def only(commands: list[str], marker: str) -> str:
    """The one command that contains ``marker``."""
    matches = [command for command in commands if marker in command]
    assert len(matches) == 1, f"{len(matches)} commands contain {marker!r}"
    return matches[0]


@pytest.mark.parametrize("name", LAUNCHER_FILES)
def test_every_ray_start_has_token_auth_and_the_token(name: str) -> None:
    config = load(name)
    ray_starts = [command for command in start_commands(config) if "ray start" in command]
    assert len(ray_starts) == 2
    for command in ray_starts:
        assert "RAY_AUTH_MODE=token" in command, command
    # The token made on the laptop, copied to where Ray looks for it on every node.
    mounts = config["file_mounts"]
    targets = [remote for remote, local in mounts.items() if local == "~/.ray/auth_token"]
    assert len(targets) == 1 and targets[0].endswith("/.ray/auth_token")


@pytest.mark.parametrize("name", LAUNCHER_FILES)
def test_ray_and_mlflow_listen_on_the_heads_private_address(name: str) -> None:
    config = load(name)
    head = config["head_start_ray_commands"]
    every_command = "\n".join(start_commands(config))
    for everywhere in ("0.0.0.0", "127.0.0.1", "localhost", "::"):
        assert everywhere not in every_command, f"a start command of {name} binds {everywhere}"

    # One command records the head's address; the others read it into HEAD_IP.
    recorder = only(head, "> ~/xmr/head_address")
    assert "hostname -I" in recorder
    ray_head = only(head, "ray start --head")
    mlflow = only(head, "mlflow server")
    for command in (ray_head, mlflow):
        assert "HEAD_IP=$(cat ~/xmr/head_address)" in command
        assert head.index(command) > head.index(recorder)
    assert flag_value(ray_head, "--dashboard-host") == "$HEAD_IP"
    assert flag_value(mlflow, "--host") == "$HEAD_IP"

    # Every Ray process reaches that one MLflow server: the head's by HEAD_IP, the workers' by
    # RAY_HEAD_IP (the head's private address, set by the launcher).
    port = flag_value(mlflow, "--port")
    assert f"MLFLOW_TRACKING_URI=http://$HEAD_IP:{port}" in ray_head
    worker = only(config["worker_start_ray_commands"], "ray start")
    assert flag_value(worker, "--address") == "$RAY_HEAD_IP:6379"
    assert f"MLFLOW_TRACKING_URI=http://$RAY_HEAD_IP:{port}" in worker
    # The database stays on the head; the artifacts go where every node's runs can be read.
    assert flag_value(mlflow, "--backend-store-uri").startswith("sqlite:///$HOME/")
    assert flag_value(mlflow, "--artifacts-destination").startswith(("s3://", "/mnt/shared/"))


def xmr_ref(requirement_line: str) -> str:
    """The git ref a setup command installs xmr at (``XMR_REF=...`` or inline after ``@``)."""
    found = re.search(r'"xmr @ git\+https://github\.com/[^/"]+/xmr@([^"]+)"', requirement_line)
    assert found, f"no xmr requirement in: {requirement_line}"
    ref = found.group(1)
    if ref in ("$XMR_REF", "${XMR_REF}"):
        assignment = re.search(r"\bXMR_REF=([^;\s]+)", requirement_line)
        assert assignment, f"XMR_REF is not set in: {requirement_line}"
        ref = assignment.group(1)
    return ref


def ray_pin(text: str) -> str:
    found = re.search(r"ray\[[a-z,]+\]==(\d+\.\d+\.\d+)", text)
    assert found, "Ray is not pinned to one version"
    return found.group(1)


def is_pinned(ref: str) -> bool:
    """Whether ``ref`` always names the same code, or is the placeholder for such a ref."""
    return ref == REF_PLACEHOLDER or bool(PINNED_REF.fullmatch(ref))


@pytest.mark.parametrize("name", LAUNCHER_FILES)
def test_every_node_installs_xmr_at_a_pinned_ref(name: str) -> None:
    install = only(load(name)["setup_commands"], "xmr @ ")
    assert is_pinned(xmr_ref(install)), xmr_ref(install)
    ray_pin(install)


@pytest.mark.parametrize("name", (*LAUNCHER_FILES, KUBERAY))
def test_the_ref_placeholder_says_how_to_fill_it(name: str) -> None:
    if REF_PLACEHOLDER in (REPO / name).read_text():
        assert REF_PLACEHOLDER in comments(name) and "git rev-parse HEAD" in comments(name)


def repository_tags() -> set[str]:
    """The tags of this checkout's repository (skips the test outside a git checkout)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "tag", "--list"], capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return set(listed.stdout.split())


@pytest.mark.parametrize("name", (*LAUNCHER_FILES, KUBERAY))
def test_no_cluster_file_names_a_tag_the_repository_lacks(name: str) -> None:
    """A file that installs ``v0.1.0`` while the repository has no such tag fails on every
    node; a tag named in a comment misleads as much."""
    named = {found.group(1) or found.group(0) for found in TAG.finditer((REPO / name).read_text())}
    assert named <= repository_tags(), f"{name} names tags the repository lacks: {named}"


def test_tag_pattern_example() -> None:
    text = 'pip install "xmr @ https://github.com/o/xmr/archive/refs/tags/v0.1.0.zip" # v2.0.1'
    assert {m.group(1) or m.group(0) for m in TAG.finditer(text)} == {"v0.1.0", "v2.0.1"}
    assert not list(TAG.finditer('"ray[default]==2.60.0" uv/0.13.9/install.sh'))


def test_xmr_ref_example() -> None:
    line = 'XMR_REF=main; uv pip install "xmr @ git+https://github.com/org/xmr@${XMR_REF}"'
    assert xmr_ref(line) == "main"
    assert not PINNED_REF.fullmatch(xmr_ref(line))
    assert xmr_ref('pip install "xmr @ git+https://github.com/org/xmr@v1.2.3"') == "v1.2.3"


def test_node_types_are_consistent() -> None:
    config = load(AWS)
    node_types = config["available_node_types"]
    head = node_types[config["head_node_type"]]
    assert head.get("max_workers", 0) == 0
    assert head["resources"].get("CPU") == 0  # Ray's tasks and actors stay off the head
    custom = set()
    for name, node_type in node_types.items():
        if node_type is head:
            continue
        assert 0 <= node_type["min_workers"] <= node_type["max_workers"] <= config["max_workers"]
        assert node_type["resources"].get("CPU", 0) > 0, name
        custom |= set(node_type["resources"]) - RAY_RESOURCES
    # The custom resources the comments tell users to ask for are the ones the node types have.
    assert set(re.findall(r"\b[a-z]+_node\b", comments(AWS))) == custom
    assert any(node_type["resources"].get("GPU", 0) > 0 for node_type in node_types.values())


def test_on_prem_config_names_its_machines() -> None:
    provider = load(ON_PREM)["provider"]
    assert provider["worker_ips"]
    assert provider["head_ip"] not in provider["worker_ips"]


# --- The KubeRay RayJob manifest -------------------------------------------------------------


@dataclass(frozen=True)
class Fields:
    """What an object of a CRD may contain (``properties``) and must contain (``required``).

    ``nested`` holds the tables of the fields checked further (an object, or a list of them);
    the other fields' values are not looked into (free-form maps such as labels or
    rayStartParams, Kubernetes objects we don't use).
    """

    allowed: frozenset[str]
    required: frozenset[str] = frozenset()
    nested: dict[str, Fields] = field(default_factory=dict)


def fields(allowed: str, required: str = "", **nested: Fields) -> Fields:
    return Fields(frozenset(allowed.split()), frozenset(required.split()), nested)


# From KubeRay v1.7.0's CRD, ray-operator/config/crd/bases/ray.io_rayjobs.yaml (version v1):
# the objects on the paths this manifest uses, each with all of its fields. Kubernetes' own
# objects (pod template, container, env var) are as that CRD embeds them.
ENV_VAR = fields(
    "name value valueFrom",
    "name",
    valueFrom=fields(
        "configMapKeyRef fieldRef fileKeyRef resourceFieldRef secretKeyRef",
        secretKeyRef=fields("key name optional", "key"),
    ),
)
CONTAINER = fields(
    "args command env envFrom image imagePullPolicy lifecycle livenessProbe name ports"
    " readinessProbe resizePolicy resources restartPolicy restartPolicyRules securityContext"
    " startupProbe stdin stdinOnce terminationMessagePath terminationMessagePolicy tty"
    " volumeDevices volumeMounts workingDir",
    "name",
    env=ENV_VAR,
    ports=fields("containerPort hostIP hostPort name protocol", "containerPort"),
    resources=fields("claims limits requests"),
)
POD_TEMPLATE = fields(
    "metadata spec",
    metadata=fields("annotations finalizers labels name namespace"),
    spec=fields(
        "activeDeadlineSeconds affinity automountServiceAccountToken containers dnsConfig"
        " dnsPolicy enableServiceLinks ephemeralContainers hostAliases hostIPC hostNetwork"
        " hostPID hostUsers hostname hostnameOverride imagePullSecrets initContainers nodeName"
        " nodeSelector os overhead preemptionPolicy priority priorityClassName readinessGates"
        " resourceClaims resources restartPolicy runtimeClassName schedulerName"
        " schedulingGates schedulingGroup securityContext serviceAccount serviceAccountName"
        " setHostnameAsFQDN shareProcessNamespace subdomain terminationGracePeriodSeconds"
        " tolerations topologySpreadConstraints volumes",
        "containers",
        containers=CONTAINER,
        tolerations=fields("effect key operator tolerationSeconds value"),
    ),
)
RAY_JOB = fields(
    "apiVersion kind metadata spec status",
    "apiVersion kind metadata spec",
    metadata=fields("annotations generateName labels name namespace"),  # Kubernetes ObjectMeta
    spec=fields(
        "activeDeadlineSeconds backoffLimit clusterSelector deletionStrategy entrypoint"
        " entrypointNumCpus entrypointNumGpus entrypointResources jobId managedBy metadata"
        " preRunningDeadlineSeconds rayClusterSpec runtimeEnvYAML shutdownAfterJobFinishes"
        " submissionMode submitterConfig submitterPodTemplate suspend ttlSecondsAfterFinished",
        # Not required by the CRD, but by this manifest: a job that runs and cleans up after.
        "entrypoint runtimeEnvYAML rayClusterSpec shutdownAfterJobFinishes",
        rayClusterSpec=fields(
            "authOptions autoscalerOptions enableInTreeAutoscaling gcsFaultToleranceOptions"
            " headGroupSpec headServiceAnnotations historyServerOptions managedBy networkPolicy"
            " rayVersion suspend tlsOptions upgradeStrategy workerGroupSpecs",
            "headGroupSpec",
            authOptions=fields("enableK8sTokenAuth mode secretName"),
            headGroupSpec=fields(
                "enableIngress headService ingressOptions labels rayStartParams resources"
                " serviceType template",
                "template",
                template=POD_TEMPLATE,
            ),
            workerGroupSpecs=fields(
                "groupName idleTimeoutSeconds labels maxReplicas minReplicas numOfHosts"
                " priority rayStartParams replicas resources scaleStrategy suspend template",
                "groupName maxReplicas minReplicas template",
                template=POD_TEMPLATE,
            ),
        ),
    ),
)


def field_problems(value: Any, table: Fields, path: str = "") -> list[str]:
    """Unknown and missing fields of ``value`` (an object, or a list of objects) per ``table``,
    each as ``"unknown field <dotted path>"`` or ``"missing field <dotted path>"``."""
    if isinstance(value, list):
        return [
            problem
            for index, item in enumerate(value)
            for problem in field_problems(item, table, f"{path}[{index}]")
        ]
    if not isinstance(value, dict):
        return [f"{path}: expected an object, got {value!r}"]

    def where(key: str) -> str:
        return f"{path}.{key}" if path else key

    problems = [f"unknown field {where(key)}" for key in value if key not in table.allowed]
    problems += [f"missing field {where(key)}" for key in sorted(table.required - set(value))]
    for key, nested in table.nested.items():
        if key in value:
            problems += field_problems(value[key], nested, where(key))
    return problems


def test_rayjob_uses_only_documented_fields() -> None:
    manifest = load(KUBERAY)
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayJob")
    assert field_problems(manifest, RAY_JOB) == []


@pytest.mark.parametrize(
    ("path", "typo", "problems"),
    [
        (
            ("spec", "entrypoint"),
            "entryPoint",
            ["unknown field spec.entryPoint", "missing field spec.entrypoint"],
        ),
        (
            ("spec", "rayClusterSpec", "headGroupSpec", "rayStartParams"),
            "rayStartParam",
            ["unknown field spec.rayClusterSpec.headGroupSpec.rayStartParam"],
        ),
        (
            ("spec", "shutdownAfterJobFinishes"),
            "shutdownAfterJobFinished",
            [
                "unknown field spec.shutdownAfterJobFinished",
                "missing field spec.shutdownAfterJobFinishes",
            ],
        ),
    ],
)
def test_rayjob_check_catches_a_typo_key(
    path: tuple[str, ...], typo: str, problems: list[str]
) -> None:
    assert field_problems(renamed(load(KUBERAY), path, typo), RAY_JOB) == problems


def test_rayjob_check_looks_into_lists() -> None:
    manifest = load(KUBERAY)
    gpu_group = manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]
    gpu_group["template"]["spec"]["containers"][0]["resource"] = {}
    assert field_problems(manifest, RAY_JOB) == [
        "unknown field spec.rayClusterSpec.workerGroupSpecs[1].template.spec.containers[0].resource"
    ]


def runtime_env(manifest: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(manifest["spec"]["runtimeEnvYAML"])


def archive_ref(url: str) -> str:
    """The ref of a GitHub source archive URL (``.../archive/refs/tags/<tag>.zip`` or
    ``.../archive/<commit>.zip``)."""
    found = re.search(r"/archive/(?:refs/tags/)?([^/]+)\.zip$", url)
    assert found, f"not a GitHub archive of a tag or commit: {url}"
    return found.group(1)


@pytest.mark.usefixtures("no_network")
def test_rayjob_runtime_env_is_valid_and_pinned() -> None:
    env = runtime_env(load(KUBERAY))
    assert set(env) <= RuntimeEnv.known_fields
    RuntimeEnv(**env)  # Ray's own checks (working_dir must be an archive, pip a list...)
    (xmr,) = [requirement for requirement in env["pip"] if requirement.startswith("xmr @ ")]
    refs = {archive_ref(env["working_dir"]), archive_ref(xmr)}
    assert len(refs) == 1 and is_pinned(refs.pop())
    assert env["env_vars"]["MLFLOW_TRACKING_URI"].startswith("http://")


def env_vars(value: Any) -> Iterator[dict[str, Any]]:
    """Every entry of every ``env`` list anywhere in a manifest."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "env" and isinstance(item, list):
                yield from item
            else:
                yield from env_vars(item)
    elif isinstance(value, list):
        for item in value:
            yield from env_vars(item)


def test_rayjob_secrets_come_from_kubernetes_secrets() -> None:
    manifest = load(KUBERAY)
    secret_names = re.compile("KEY|SECRET|TOKEN|PASSWORD")
    secret_vars = [var for var in env_vars(manifest) if secret_names.search(var["name"])]
    assert secret_vars
    for var in secret_vars:
        assert "value" not in var and "secretKeyRef" in var["valueFrom"], var
    auth = manifest["spec"]["rayClusterSpec"]["authOptions"]
    assert auth["mode"] == "token" and auth["secretName"]


def test_rayjob_images_match_its_ray_version() -> None:
    manifest = load(KUBERAY)
    cluster = manifest["spec"]["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    images = [c["image"] for g in groups for c in g["template"]["spec"]["containers"]]
    assert {image.split(":")[1].split("-")[0] for image in images} == {cluster["rayVersion"]}
    gpu_groups = [g for g in groups if "gpu" in g["template"]["spec"]["containers"][0]["image"]]
    assert gpu_groups
    for group in gpu_groups:
        assert group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]


# --- The three files agree ---------------------------------------------------------------------


def test_all_cluster_files_pin_the_same_xmr_and_ray() -> None:
    refs, rays = set(), set()
    for name in LAUNCHER_FILES:
        install = only(load(name)["setup_commands"], "xmr @ ")
        refs.add(xmr_ref(install))
        rays.add(ray_pin(install))
    manifest = load(KUBERAY)
    refs.add(archive_ref(runtime_env(manifest)["working_dir"]))
    rays.add(manifest["spec"]["rayClusterSpec"]["rayVersion"])
    assert len(refs) == 1, refs
    assert len(rays) == 1, rays
