"""The trainer image ships NCCL Inspector where the accelerator catalog points run pods
(`nccl_inspector.plugin`): built with `make` from NVIDIA/nccl's source in a builder stage,
at a pinned release and commit, and copied to that path. Read from the Dockerfile (no Docker
engine needed)."""

from __future__ import annotations

import re

from catalog.loader import accelerators
from tests.kustomize.conftest import ROOT
from tests.kustomize.test_images import arg_defaults, instructions

DOCKERFILE = ROOT / "docker/trainer/Dockerfile"
STAGE = "nccl-inspector"


def stages() -> dict[str, list[tuple[str, str]]]:
    """{stage name ("" for the last, the image): its instructions}; ARGs before the first
    FROM under "global"."""
    out: dict[str, list] = {"global": []}
    current = "global"
    for word, rest in instructions(DOCKERFILE):
        if word == "FROM":
            parts = rest.split()
            current = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            out[current] = []
        out[current].append((word, rest))
    return out


def test_the_catalog_names_one_plugin_path():
    paths = {a.nccl_inspector.plugin for a in accelerators().values() if a.nccl_inspector}
    assert paths == {"/usr/local/nccl-inspector/lib/libnccl-profiler-inspector.so"}


def test_the_image_installs_the_plugin_at_the_catalogs_path():
    (path,) = {a.nccl_inspector.plugin for a in accelerators().values() if a.nccl_inspector}
    image = stages()[""]
    copies = [rest.split() for word, rest in image if word == "COPY"]
    assert [f"--from={STAGE}", path, path] in copies
    builder = " ".join(rest for word, rest in stages()[STAGE] if word == "RUN")
    assert f"install -D -m 0644 libnccl-profiler-inspector.so {path}" in builder


def test_the_plugin_is_built_from_a_pinned_nccl_release_with_make():
    every = stages()
    args = arg_defaults(every["global"])
    assert re.fullmatch(r"\d+\.\d+\.\d+-\d+", args["NCCL_VERSION"])
    assert re.fullmatch(r"[0-9a-f]{40}", args["NCCL_COMMIT"])
    assert args["CUDA_DEVEL"].startswith("nvidia/cuda:") and "-devel-" in args["CUDA_DEVEL"]
    assert (
        args["CUDA_DEVEL"].split(":")[1].split("-")[0]
        == args["CUDA_BASE"].split(":")[1].split("-")[0]
    )
    run = " ".join(rest for word, rest in every[STAGE] if word == "RUN")
    assert (
        'git clone --depth 1 --branch "v${NCCL_VERSION}" https://github.com/NVIDIA/nccl.git' in run
    )
    assert 'rev-parse HEAD)" = "${NCCL_COMMIT}"' in run  # the tag is the pinned commit
    assert "ext-profiler/inspector" in run and "plugins/profiler/inspector" in run
    assert "make CUDA_HOME=/usr/local/cuda" in run and "-march=native" in run  # dropped
    image = " ".join(rest for word, rest in every[""] if word == "RUN")
    assert "nvidia-nccl-cu" in image and "${NCCL_VERSION}" in image  # torch's NCCL checked
