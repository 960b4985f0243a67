"""The README's ``curl`` line, run against a real ``serve`` with the sample AdmissionReview under
examples/: the answer carries the review's uid and the patch the README describes."""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess

import pytest

from tests.conftest import ROOT
from tests.server.support import ServerProcess, serve_args
from tests.workflow.test_readme import REVIEW, _blocks

pytestmark = pytest.mark.server


def test_the_curl_line_gets_a_patch_from_a_real_server(tmp_path, server_certs):
    (line,) = [ln for b in _blocks("sh") for ln in b.splitlines() if ln.startswith("curl ")]
    assert "--data @examples/admission/review.json" in line and "https://localhost:8443/mutate" in line
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    server = ServerProcess(tmp_path, serve_args(server_certs, "--namespace-labels", "none", "--workers", "1"),
                           ca_files=[server_certs.ca_cert]).start()  # fmt: skip
    try:
        args = shlex.split(line.replace("certs/ca.crt", str(server_certs.ca_cert)).replace(":8443", f":{server.port}"))
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["response"]["uid"] == json.loads(REVIEW.read_text())["request"]["uid"]
        patch = json.loads(base64.b64decode(answer["response"]["patch"]))
        assert {"op": "add", "path": "/spec/priorityClassName", "value": "gpu-inference"} in patch
        validate = subprocess.run([*args[:-1], args[-1].replace("/mutate", "/validate")], cwd=ROOT,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
        assert json.loads(validate.stdout)["response"]["allowed"] is False  # the unpatched pod: placement-missing
    finally:
        assert server.stop() == 0
