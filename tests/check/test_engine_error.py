"""Values that once made the engine raise are ordinary denials in ``check`` (exit 1, not 2)."""

from __future__ import annotations

import pytest

from webhook.cli import main

GOOD = """apiVersion: v1
kind: Pod
metadata:
  name: infer
  labels: {gpu-admission.io/workload: inference}
  annotations: {gpu-admission.io/gpu-memory: 4Gi}
spec:
  containers: [{name: c, image: i}]
"""


@pytest.mark.parametrize("value", ["²", "9" * 5000])
def test_the_superscript_gpu_count_is_a_denial_not_a_crash(tmp_path, capsys, value):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD.replace("{gpu-admission.io/gpu-memory: 4Gi}", f'{{gpu-admission.io/gpus: "{value}"}}'))
    code = main(["check", str(path)])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "[intent-invalid]" in out
