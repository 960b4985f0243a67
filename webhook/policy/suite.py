"""The ``PolicyTest`` suite format as strict pydantic models: a typo in a suite is an error, not a no-op.

A test that silently ignores ``expect: {rulez: [...]}`` passes forever and protects nothing, so
unknown fields are rejected (with file:line and a "did you mean" hint) exactly like in policy files.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

API_VERSION = "gpu-admission.io/v1"
KIND = "PolicyTest"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=False)


class Expect(_Model):
    """What the decision must look like. Every field is optional; an empty ``expect`` only runs the case."""

    allowed: bool | None = Field(None, description="the verdict: true admitted (maybe with warnings), false denied")
    rules: tuple[str, ...] = Field((), description="rule ids that must fire (any action but off)")
    exact_rules: bool = Field(False, description="no rule other than those in `rules` may fire")
    not_rules: tuple[str, ...] = Field((), description="rule ids that must not fire")
    warnings: tuple[str, ...] = Field(
        (), description="each entry: a rule id that must fire as a warning, or a substring of some warning"
    )
    messages: tuple[str, ...] = Field((), description="substrings that must occur in some violation message")
    object: Any = Field(
        None,
        description="a subset the resulting object must contain (maps by key; lists element by element, "
        "or any matching element); null matches an absent field",
    )
    patch: list[dict[str, Any]] | None = Field(None, description="the exact JSON Patch operations, in order")
    exceptions: tuple[str, ...] = Field(
        (), description="policy exceptions that must have turned a finding into an audit entry (by name)"
    )


class UserInfo(_Model):
    """Who sends the request (``request.userInfo``), for the rules that judge the requester (the scheduler's
    claim marker, policy exceptions)."""

    username: str = Field(..., min_length=1, description="e.g. system:kube-scheduler")
    groups: tuple[str, ...] = Field((), description="the requester's groups")


class Case(_Model):
    """One object through the engine, and what must come out."""

    name: str = Field(..., min_length=1, description="unique within the suite; `--run` matches suite/name")
    object: dict[str, Any] | None = Field(None, description="the object, inline")
    file: str | None = Field(None, description="a manifest file, relative to the suite file")
    document: int | None = Field(None, ge=0, description="0-based index of the document in `file`")
    namespace: str | None = Field(None, description="namespace; default the object's own, then `default`")
    namespace_labels: dict[str, str] | None = Field(
        None, description="the namespace's labels; default the suite's `namespaces` entry"
    )
    operation: Literal["CREATE", "UPDATE"] = "CREATE"
    as_stored: bool = Field(
        False,
        description="judge the object as /validate does: as the apiserver stores it, our mutation not re-applied",
    )
    old_object: dict[str, Any] | None = Field(None, description="UPDATE: the object before, inline")
    old_file: str | None = Field(None, description="UPDATE: the object before, from a file")
    old_document: int | None = Field(None, ge=0, description="0-based index of the document in `oldFile`")
    user_info: UserInfo | None = Field(
        None, description="the requester, as the apiserver sends it; default none (a user's manifest)"
    )
    date: dt.date | None = Field(None, description="the day exceptions are judged on (YYYY-MM-DD); default today, UTC")
    expect: Expect = Field(default_factory=Expect)

    @model_validator(mode="after")
    def _sources(self) -> Case:
        if (self.object is None) == (self.file is None):
            raise ValueError("give the object either inline (object:) or as a file (file:), exactly one")
        if self.document is not None and self.file is None:
            raise ValueError("document: selects a document of file:, which is not set")
        has_old = self.old_object is not None or self.old_file is not None
        if self.old_object is not None and self.old_file is not None:
            raise ValueError("give the old object either inline (oldObject:) or as a file (oldFile:), not both")
        if self.operation == "UPDATE" and not has_old:
            raise ValueError("operation UPDATE needs the object before the update (oldObject: or oldFile:)")
        if self.operation == "CREATE" and has_old:
            raise ValueError("oldObject/oldFile only make sense with operation: UPDATE")
        return self


class SuiteMetadata(_Model):
    name: str = Field("", description="suite name in reports; default the file name without .test.yaml")


class Suite(_Model):
    """A ``PolicyTest`` document."""

    api_version: Literal["gpu-admission.io/v1"]
    kind: Literal["PolicyTest"]
    metadata: SuiteMetadata = Field(default_factory=SuiteMetadata)
    policy: str | None = Field(
        None,
        description="policy directory relative to the suite file; default the directory that holds the "
        "suite's tests/ directory",
    )
    namespaces: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="labels of namespaces the cases use, by namespace name"
    )
    context: tuple[dict[str, Any], ...] = Field(
        (),
        description="cluster objects every case is judged with, as `check --cluster-objects` reads them: "
        "DeviceClasses, ResourceClaimTemplates, ResourceClaims, ResourceSlices, ComputeDomains, Nodes",
    )
    cases: tuple[Case, ...] = Field(..., min_length=1)
