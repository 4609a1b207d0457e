"""Infra against kustomize: Workload Identity lines up, and the root Application is valid.

Every annotated Kubernetes service account in the cluster's
kustomize overlay names a Google service account infra creates and binds to that KSA.

A KSA annotated with `iam.gke.io/gcp-service-account` can act as that Google account only
if infra granted `roles/iam.workloadIdentityUser` on it to exactly that namespace/name.
"""

from __future__ import annotations

import yaml

from catalog import repo_root

ANNOTATION = "iam.gke.io/gcp-service-account"
WI_BINDING = "gcp:serviceaccount/iAMMember:IAMMember"


def annotated_ksas(cluster: str) -> set[tuple[str, str, str]]:
    """(namespace, name, Google account email) of each annotated ServiceAccount."""
    folder = repo_root() / "kustomize" / "overlays" / cluster
    out = set()
    for path in sorted(folder.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "ServiceAccount":
                continue
            meta = doc["metadata"]
            email = (meta.get("annotations") or {}).get(ANNOTATION)
            if email:
                out.add((meta.get("namespace", ""), meta["name"], email))
    return out


def bindings(program, spec) -> set[tuple[str, str, str]]:
    """(namespace, name, email) of each Workload Identity binding infra declares."""
    prefix = f"serviceAccount:{spec.project}.svc.id.goog["
    out = set()
    for r in program.of_type(WI_BINDING):
        assert r.inputs["role"] == "roles/iam.workloadIdentityUser"
        namespace, name = r.inputs["member"].removeprefix(prefix).rstrip("]").split("/")
        email = r.inputs["serviceAccountId"].rsplit("/", 1)[-1]
        out.add((namespace, name, email))
    return out


def test_overlay_service_accounts_are_bound_by_infra(program, spec, cluster_name):
    ksas = annotated_ksas(cluster_name)
    assert {ns for ns, _, _ in ksas} >= {*spec.teams, "warden", "observability"}
    assert ksas == bindings(program, spec)
    emails = set(program.outputs["service_accounts"].values())
    assert {email for _, _, email in ksas} <= emails


def test_root_application_is_valid_for_the_pinned_argo_cd(program):
    """The root Application matches the Argo CD CRD schema of the version infra installs."""
    import json

    import jsonschema

    schema_file = repo_root() / "kustomize" / "schemas" / "argoproj.io_v1alpha1_Application.json"
    [app] = program.of_type("kubernetes:argoproj.io/v1alpha1:Application")
    manifest = {key: app.inputs[key] for key in ("apiVersion", "kind", "metadata", "spec")}
    validator = jsonschema.Draft202012Validator(json.loads(schema_file.read_text()))
    assert [e.message for e in validator.iter_errors(manifest)] == []
    broken = {**manifest, "spec": {**manifest["spec"], "sourcePath": "x"}}
    assert list(validator.iter_errors(broken)), "the schema rejects unknown fields"


def test_cross_region_firewall_and_synchronizer_policy_agree(program, spec):
    """The VPC rule and the committed NetworkPolicy open the same port to the same ranges:
    traffic the one admits, the other does not drop."""
    folder = repo_root() / "kustomize" / "overlays" / spec.name / "generated"
    policies = [
        doc
        for doc in yaml.safe_load_all((folder / "teams.yaml").read_text())
        if isinstance(doc, dict) and doc["metadata"]["name"] == "cross-region-synchronizer"
    ]
    rules = [r.inputs for r in program.of_type("gcp:compute/firewall:Firewall")]
    [rule] = [r for r in rules if r["name"] == f"{spec.name}-cross-region-sync"] or [None]
    if spec.cross_region is None:
        assert rule is None and policies == []
        return
    assert {p["metadata"]["namespace"] for p in policies} == set(spec.cross_region.teams)
    for policy in policies:
        [ingress] = policy["spec"]["ingress"]
        assert [peer["ipBlock"]["cidr"] for peer in ingress["from"]] == rule["sourceRanges"]
        assert [str(p["port"]) for p in ingress["ports"]] == rule["allows"][0]["ports"]
