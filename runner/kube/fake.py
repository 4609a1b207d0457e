"""An in-memory Kubernetes API for tests: objects keyed by (apiVersion, kind, ns, name)."""

from __future__ import annotations

import copy

from runner.kube import NotFound, Object


def _key(obj: Object) -> tuple[str, str, str | None, str]:
    meta = obj.get("metadata", {})
    return obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]


class FakeKube:
    """Stores applied objects; records every call in `calls` for assertions."""

    def __init__(self, objects: list[Object] | None = None):
        self.objects: dict[tuple, Object] = {}
        self.calls: list[tuple] = []
        for obj in objects or []:
            self.objects[_key(obj)] = copy.deepcopy(obj)

    def apply(self, obj: Object) -> Object:
        self.calls.append(("apply", *_key(obj)))
        stored = copy.deepcopy(obj)
        self.objects[_key(obj)] = stored
        return copy.deepcopy(stored)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Object:
        self.calls.append(("get", api_version, kind, namespace, name))
        try:
            return copy.deepcopy(self.objects[(api_version, kind, namespace, name)])
        except KeyError:
            raise NotFound(f"{kind} {namespace}/{name} not found") from None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        labels: dict[str, str] | None = None,
    ) -> list[Object]:
        self.calls.append(("list", api_version, kind, namespace))
        found = []
        for (version, k, ns, _), obj in sorted(self.objects.items(), key=lambda kv: str(kv[0])):
            if (version, k) != (api_version, kind) or (namespace and ns != namespace):
                continue
            have = obj.get("metadata", {}).get("labels", {})
            if all(have.get(key) == value for key, value in (labels or {}).items()):
                found.append(copy.deepcopy(obj))
        return found

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        self.calls.append(("delete", api_version, kind, namespace, name))
        if self.objects.pop((api_version, kind, namespace, name), None) is None:
            raise NotFound(f"{kind} {namespace}/{name} not found")
