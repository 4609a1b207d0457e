"""The training images: Dockerfile rules (a small hadolint of our own) and the structure of
the CI workflow that builds, pushes and pins them. All offline."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from catalog.images import image_problem
from tests.kustomize.conftest import ROOT

DOCKERFILES = sorted((ROOT / "docker").glob("*/Dockerfile"))
WORKFLOW = ROOT / ".github/workflows/images.yaml"
EXACT_ACTION = re.compile(r"^[\w.-]+/[\w.-]+@(v\d+\.\d+\.\d+|[0-9a-f]{40})$")


def instructions(path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest))
            current = ""
    return out


def arg_defaults(steps) -> dict[str, str]:
    return dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)


def pyproject_pin(package: str) -> str:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in [*data["dependencies"], *data["optional-dependencies"]["driver"]]:
        if re.split(r"[\[=<>]", dep)[0] == package:
            return dep.split("==")[1]
    raise KeyError(package)


def lint(path) -> list[str]:
    """Problems of one Dockerfile, one line each."""
    steps = instructions(path)
    args = arg_defaults(steps)
    found = []
    for word, rest in steps:
        if word == "FROM":
            ref = rest.split()[0]
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), ref)
            if problem := image_problem(base):
                found.append(f"FROM {base}: {problem}")
        if word == "ADD":
            found.append("ADD: use COPY (no remote or archive magic)")
        if word == "ENV" and re.search(r"\b(NCCL_\w+|LD_LIBRARY_PATH)=", rest):
            found.append(f"ENV {rest[:40]}: NCCL and library settings come from the catalog")
        if word != "RUN":
            continue
        if "apt-get install" in rest:
            if "--no-install-recommends" not in rest:
                found.append("RUN apt-get install without --no-install-recommends")
            if "apt-get update" not in rest or "rm -rf /var/lib/apt/lists/*" not in rest:
                found.append("RUN apt-get install: update and clean the lists in the same RUN")
        if re.search(r"(curl|wget)[^|]*\|\s*(ba)?sh", rest):
            found.append("RUN pipes a download into a shell")
        for spec in re.findall(r"pip install ([^&;]+)", rest):
            for pkg in spec.split():
                pkg = pkg.strip("\"'")
                if pkg.startswith("-") or pkg.startswith(".") or "==" in pkg:
                    continue
                found.append(f"RUN pip install {pkg}: not pinned (==) and not the project")
    if ("USER" not in {w for w, _ in steps}) and "runs as root" not in path.read_text():
        found.append("no USER and no stated reason to run as root")
    return found


@pytest.mark.parametrize("path", DOCKERFILES, ids=[p.parent.name for p in DOCKERFILES])
def test_dockerfile_rules(path):
    assert lint(path) == []


@pytest.mark.parametrize("path", DOCKERFILES, ids=[p.parent.name for p in DOCKERFILES])
def test_torch_is_the_pinned_version(path):
    args = arg_defaults(instructions(path))
    assert args["TORCH_VERSION"] == pyproject_pin("torch")
    assert args["PYTHON_VERSION"] == "3.11"
    assert args["CUDA_BASE"].startswith("nvidia/cuda:")


def test_both_images_are_built_here_and_listed():
    assert [p.parent.name for p in DOCKERFILES] == ["preflight", "trainer"]
    listed = {e["name"]: e["image"] for e in yaml.safe_load(
        (ROOT / "kustomize/images.yaml").read_text())["images"]}  # fmt: skip
    for path in DOCKERFILES:
        assert listed[path.parent.name].startswith(f"{{registry}}/{path.parent.name}:")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("FROM ubuntu\n", "FROM ubuntu: has no tag or digest"),
        ("FROM ubuntu:latest\n", "FROM ubuntu:latest: tag 'latest' is not a release version"),
        ("FROM a:1.0\nENV NCCL_NET=gIB\n", "NCCL and library settings come from the catalog"),
        ("FROM a:1.0\nRUN apt-get install -y x\n", "without --no-install-recommends"),
        ("FROM a:1.0\nRUN pip install numpy\n", "pip install numpy: not pinned"),
        ("FROM a:1.0\nRUN curl -s https://x | sh\n", "pipes a download into a shell"),
        ("FROM a:1.0\nADD https://x/y.tgz /\n", "ADD: use COPY"),
    ],
)
def test_the_linter_catches(tmp_path, text, problem):
    path = tmp_path / "Dockerfile"
    path.write_text(text + "USER 1000\n")
    assert any(problem in p for p in lint(path)), lint(path)


# --- the workflow -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps(workflow, job: str) -> list[dict]:
    return workflow["jobs"][job]["steps"]


def test_workflow_triggers_and_least_permissions(workflow):
    on = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert on["push"]["branches"] == ["main"]
    assert "docker/**" in on["push"]["paths"] and "workflow_dispatch" in on
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["jobs"]["build"]["permissions"]["id-token"] == "write"
    assert "contents" not in workflow["jobs"]["build"]["permissions"] or \
        workflow["jobs"]["build"]["permissions"]["contents"] == "read"  # fmt: skip


def test_every_action_is_pinned_to_an_exact_version(workflow):
    for name, job in workflow["jobs"].items():
        for step in job["steps"]:
            if "uses" in step:
                assert EXACT_ACTION.match(step["uses"]), f"{name}: {step['uses']}"


def test_one_build_per_dockerfile_pushed_to_every_registry(workflow):
    build = workflow["jobs"]["build"]
    assert sorted(build["strategy"]["matrix"]["image"]) == [p.parent.name for p in DOCKERFILES]
    [push] = [s for s in build["steps"] if s.get("uses", "").startswith("docker/build-push")]
    assert push["with"]["file"] == "docker/${{ matrix.image }}/Dockerfile"
    assert push["with"]["push"] is True and push["with"]["context"] == "."
    run = "\n".join(s.get("run", "") for s in build["steps"])
    assert "pin_images registries" in run  # the tags are every cluster's registry


def test_pushed_digests_are_pinned_and_validated(workflow):
    assert set(workflow["jobs"]["pin"]["needs"]) >= {"build", "gib-env"}
    run = "\n".join(s.get("run", "") for s in steps(workflow, "pin"))
    wanted = ["pin_images write", '--digest "trainer=', '--digest "preflight=',
              "kustomize.tooling.generate", "runner render", "./scripts/validate"]  # fmt: skip
    for command in wanted:
        assert command in run


def test_the_gib_job_checks_the_pinned_image(workflow):
    run = "\n".join(s.get("run", "") for s in steps(workflow, "gib-env"))
    assert "nccl-rdma-installer/daemonset.yaml" in run
    assert "GIB_SET_NCCL_ENV=" in run and "tests/catalog/test_gib_env.py" in run
