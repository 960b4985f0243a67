"""``policy test`` cases with ``userInfo`` and ``date``: a suite can pin down who an exception holds for."""

from __future__ import annotations

from tests.engine.test_exceptions import POLICY_DIR

SUITE = POLICY_DIR / "tests" / "exceptions.test.yaml"


def test_the_exception_suite_passes(cli):
    run = cli("policy", "test", str(POLICY_DIR))
    assert run.code == 0, run.out
    assert "PASS: 3 case(s) in 1 suite(s)" in run.out


def test_an_expected_exception_that_does_not_apply_fails_at_its_line(cli, tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("platform.yaml", "exceptions.yaml"):
        (tmp_path / name).write_text((POLICY_DIR / name).read_text())
    first = "date: 2026-12-03\n    namespace: diag\n    object: &dcgm"
    text = SUITE.read_text().replace(first, first.replace("2026-12-03", "2027-02-01"))
    assert text != SUITE.read_text()
    (tmp_path / "tests" / "exceptions.test.yaml").write_text(text)
    run = cli("policy", "test", str(tmp_path))
    assert run.code == 1
    assert "exceptions: expected 'dcgm-diag' to apply; applied: none" in run.out
