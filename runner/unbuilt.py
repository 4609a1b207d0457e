"""A run's image that the catalog says is not built yet (kustomize/images.yaml, `unbuilt:
true`: the images workflow has not pushed it): which one, and the line that says so.

    name = unbuilt_image(spec)      # "trainer" for <cluster registry>/trainer:<tag>, or None
    notice(spec, name)              # "runs/x.yaml: image: trainer is not built yet ..."

Such an image is the one exception to pinning by digest (no digest exists yet). `runner
render` writes the run with the notice in its apps/ file's header, and `render`, `submit`
and `validate` print it on one line (`warning: ...`); `submit --apply` refuses to start a
run whose pods could not pull their image. A local run (`runner run --local`) uses no image
and is unaffected. The images workflow's pull request pins the digest, and the notice goes.
"""

from __future__ import annotations

from catalog.errors import InputError
from runner.spec_schema import RunSpec


def unbuilt_image(spec: RunSpec) -> str | None:
    """The catalog entry (not built yet) the run's image belongs to, in its cluster."""
    from catalog.images import load_entries, unbuilt_entry
    from catalog.loader import load_cluster, repo_root

    try:
        cluster = load_cluster(spec.cluster)
        entries = load_entries(repo_root())
    except InputError:  # an unknown cluster or a broken list: said where they are resolved
        return None
    return unbuilt_entry(cluster, entries, spec.image)


def notice(spec: RunSpec, name: str) -> str:
    """One line: the run's image is not built yet, and what that means for the run."""
    source, label = spec.where("image")
    return (f"{source}: {label}: {name} is not built yet (kustomize/images.yaml: unbuilt): "
            "its pods cannot start until the images workflow pushes it")  # fmt: skip
