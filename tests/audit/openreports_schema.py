"""The OpenReports CRD's schema, transcribed as JSON Schema (our own data, with its source).

Source: github.com/openreports/reports-api, ``config/crd/openreports.io_reports.yaml`` and
``config/crd/openreports.io_clusterreports.yaml`` at commit 769d97879794167439427e472eeaa4b936d628e2
(2025-12-18), CRD ``reports.openreports.io`` (scope Namespaced, kind Report, shortName reps) and
``clusterreports.openreports.io`` (scope Cluster, kind ClusterReport, shortName creps), version
``v1alpha1``, the same ``openAPIV3Schema`` for both. Facts taken from it:

- top level: apiVersion, kind, metadata, configuration, results, scope, scopeSelector, source,
  summary; nothing else (no ``x-kubernetes-preserve-unknown-fields``: the apiserver prunes any other
  field, so here every object is closed with ``additionalProperties: false`` to catch one we would lose);
- ``configuration`` requires ``limits``; ``limits`` is ``{maxResults: integer, statusFilter: [enum
  pass|fail|warn|error|skip]}``;
- ``results[]`` requires ``policy``; fields category, message, policy, rule, source (strings),
  properties (map of strings), resourceSelector (label selector), resources (ObjectReference list:
  apiVersion, fieldPath, kind, name, namespace, resourceVersion, uid, all strings), result (enum
  pass|fail|warn|error|skip), scored (boolean), severity (enum critical|high|low|medium|info),
  timestamp ``{seconds: int64, nanos: int32}``, both required;
- ``scope``: an ObjectReference; ``summary``: error, fail, pass, skip, warn (integers).
"""

from __future__ import annotations

from typing import Any

RESULTS = ["pass", "fail", "warn", "error", "skip"]

_OBJECT_REFERENCE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        k: {"type": "string"}
        for k in ("apiVersion", "fieldPath", "kind", "name", "namespace", "resourceVersion", "uid")
    },
}

_LABEL_SELECTOR: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}

_RESULT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["policy"],
    "properties": {
        "category": {"type": "string"},
        "message": {"type": "string"},
        "policy": {"type": "string"},
        "properties": {"type": "object", "additionalProperties": {"type": "string"}},
        "resourceSelector": _LABEL_SELECTOR,
        "resources": {"type": "array", "items": _OBJECT_REFERENCE},
        "result": {"type": "string", "enum": RESULTS},
        "rule": {"type": "string"},
        "scored": {"type": "boolean"},
        "severity": {"type": "string", "enum": ["critical", "high", "low", "medium", "info"]},
        "source": {"type": "string"},
        "timestamp": {
            "type": "object",
            "additionalProperties": False,
            "required": ["nanos", "seconds"],
            "properties": {
                "nanos": {"type": "integer", "minimum": 0, "maximum": 999_999_999},
                "seconds": {"type": "integer"},
            },
        },
    },
}


def schema(kind: str) -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` for ``Report`` or ``ClusterReport``, closed against pruning."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": {"const": "openreports.io/v1alpha1"},
            "kind": {"const": kind},
            "metadata": {"type": "object"},
            "configuration": {
                "type": "object",
                "additionalProperties": False,
                "required": ["limits"],
                "properties": {
                    "limits": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "maxResults": {"type": "integer"},
                            "statusFilter": {"type": "array", "items": {"type": "string", "enum": RESULTS}},
                        },
                    }
                },
            },
            "results": {"type": "array", "items": _RESULT},
            "scope": _OBJECT_REFERENCE,
            "scopeSelector": _LABEL_SELECTOR,
            "source": {"type": "string"},
            "summary": {
                "type": "object",
                "additionalProperties": False,
                "properties": {k: {"type": "integer"} for k in RESULTS},
            },
        },
    }


NAMESPACED = {"Report": True, "ClusterReport": False}
