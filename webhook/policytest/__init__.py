"""``gpu-admission policy test``: policy test suites (object in, expected verdict out), run offline.

A suite (``kind: PolicyTest``) pins what the policy must do to concrete objects — verdict, rule ids,
warnings, the mutated object or the exact patch — so that a policy change that breaks a promise
fails in CI before it reaches the ConfigMap. The engine is the admission engine itself.
"""

from webhook.policytest.load import SuiteError, discover, load_suites
from webhook.policytest.run import CaseResult, SuiteResult, run_suites

__all__ = ["CaseResult", "SuiteError", "SuiteResult", "discover", "load_suites", "run_suites"]
