"""Namespaces, Nodes and DRA objects in a snapshot are the cluster's context, read by the context pass: the
audit's "not judged" line counts workloads without GPUs or intent, never them (in either item style, with
one process or several)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.audit.conftest import POLICIES, run_cli

BLOCK = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: a
    labels: {team: a}
- apiVersion: v1
  kind: Node
  metadata:
    name: n1
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata:
    name: gpu.example.com
- apiVersion: v1
  kind: Pod
  metadata:
    name: web
    namespace: a
    ownerReferences:
    - {apiVersion: v1, kind: Node, name: n1, uid: u, controller: true}
  spec:
    containers:
    - name: c
      image: i
"""
FLOW = """\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: a}}
- {apiVersion: v1, kind: Namespace, metadata: {name: b}}
- {apiVersion: v1, kind: Node, metadata: {name: n1}}
- {apiVersion: v1, kind: Pod, metadata: {name: web, namespace: a}, spec: {containers: [{name: c, image: i}]}}
"""


@pytest.mark.parametrize("text", [BLOCK, FLOW], ids=["block", "flow"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_context_objects_are_not_workloads_without_gpus(tmp_path: Path, text: str, workers: str) -> None:
    (tmp_path / "snap.yaml").write_text(text)
    ran = run_cli("--snapshot", tmp_path / "snap.yaml", "--policy", POLICIES, "--workers", workers)
    assert ran.code == 0, ran.err
    assert "not judged: 1 without GPUs or intent" in ran.out, ran.out  # the pod; not the Namespaces or Node
