"""Run the infra program under Pulumi's mocks and record every resource it declares.

No Pulumi CLI, no cloud: `pulumi.runtime.set_mocks` replaces the engine, and a recording
monitor keeps each registration (type, name, parent, inputs). Used by `infra.plan` and the
tests under tests/infra.

    from infra.mocks import run
    declared = run("mega-euw4")
    declared.of_type("gcp:container/nodePool:NodePool")
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

from infra import settings as stack_settings

STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass
class Declared:
    """One resource the program declared."""

    type: str
    name: str
    urn: str
    parent: str | None
    custom: bool
    inputs: dict
    dependencies: list[str] = field(default_factory=list)


@dataclass
class ProgramRun:
    """Everything one run of the program declared, in declaration order, and its outputs."""

    resources: list[Declared] = field(default_factory=list)
    outputs: dict = field(default_factory=dict)

    def of_type(self, type_: str) -> list[Declared]:
        return [r for r in self.resources if r.type == type_]

    def by_urn(self) -> dict[str, Declared]:
        return {r.urn: r for r in self.resources}

    def children(self, urn: str) -> list[Declared]:
        return [r for r in self.resources if r.parent == urn]


def fake_state(type_: str, name: str, inputs: dict, project: str) -> dict:
    """Outputs a provider would compute that the program reads (emails, endpoint, ids)."""
    state = dict(inputs)
    if type_ == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{inputs.get('project', project)}.iam.gserviceaccount.com"
        state["email"] = email
        state["name"] = f"projects/{inputs.get('project', project)}/serviceAccounts/{email}"
    elif type_ == "gcp:container/cluster:Cluster":
        state["endpoint"] = "203.0.113.10"
        state["masterAuth"] = {"clusterCaCertificate": "bW9jaw=="}
    elif type_ == "gcp:artifactregistry/repository:Repository":
        state["name"] = inputs.get("repositoryId")
    return state


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self, project: str):
        self.project = project

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        resource_id = f"{args.name}-id" if args.custom else ""
        return resource_id, fake_state(args.typ, args.name, args.inputs, self.project)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


class _Recorder(pulumi_mocks.MockMonitor):
    """The stock mock monitor, plus a record of each registration and the stack outputs."""

    def __init__(self, mocks: _Mocks, run: ProgramRun):
        super().__init__(mocks)
        self.run = run

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != STACK_TYPE:
            self.run.resources.append(
                Declared(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=None if _is_stack(request.parent) else request.parent,
                    custom=bool(request.custom),
                    inputs=pulumi_mocks.rpc.deserialize_properties(request.object),
                    dependencies=list(request.dependencies),
                )
            )
        return response


def _is_stack(urn: str) -> bool:
    """True for the root stack's URN (or none): its last type is pulumi:pulumi:Stack."""
    return not urn or urn.split("::")[2].split("$")[-1] == STACK_TYPE


def run(
    name: str,
    config: dict[str, object] | None = None,
    root: Path | None = None,
    record: ProgramRun | None = None,
    source: str = "--set",
) -> ProgramRun:
    """Run the program for stack `name` under mocks, filling `record` (a new one by default).

    `config` holds stack settings (`source` names where they came from, for errors). A bad
    cluster definition or setting raises InputError before any resource is declared.
    """
    from infra.program import deploy
    from infra.settings import Settings

    record = record if record is not None else ProgramRun()
    project = stack_settings.project_name()
    values = {**stack_settings.project_defaults(), **_qualified(project, config or {})}
    pulumi.runtime.set_all_config(values)
    mocks = _Mocks(project)
    pulumi.runtime.settings.ROOT.set(None)
    monitor = _Recorder(mocks, record)
    _ensure_event_loop()
    pulumi.runtime.set_mocks(mocks, project=project, stack=name, preview=False, monitor=monitor)

    @pulumi.runtime.test
    def program():
        outputs = deploy(name, Settings.from_config(source), root)
        return pulumi.Output.from_input(outputs).apply(record.outputs.update)

    program()
    return record


def _ensure_event_loop() -> None:
    """Pulumi's mocks run on this thread's current event loop; after an `asyncio.run` in the
    same thread (it leaves none behind) there is none, so make one."""
    try:
        asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


def _qualified(project: str, config: dict[str, object]) -> dict[str, str]:
    """`key` -> `<project>:key`, values as Pulumi passes them (strings; JSON for objects)."""
    out = {}
    for key, value in config.items():
        full = key if ":" in key else f"{project}:{key}"
        out[full] = value if isinstance(value, str) else json.dumps(value)
    return out
