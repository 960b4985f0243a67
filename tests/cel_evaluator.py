"""cel-python's tree-walking evaluator, made cheaper for the test suite's emulations of the apiserver.

The emulated webhooks' matchConditions (``tests/deploy/cel_match.py``), ValidatingAdmissionPolicies
(``tests/deploy/cel_policy.py``) and the in-tree apiserver (``tests/intree/apiserver.py``) evaluate the
rendered CEL thousands of times per test; cel-python's evaluator was most of the suite's CPU. Two changes,
neither of which changes a value or an error:

* ``&&`` and ``||`` skip the right operand when the left one decides. CEL's logical operators are
  commutative over errors (``false && error`` is false, whichever side errs), which cel-python implements
  by always evaluating both sides. Skipping the right side when the left is ``false`` (``&&``) or ``true``
  (``||``) gives the same value and errors (an error on the left still evaluates the right).
* A leaf of the parse tree sits under a chain of one-child precedence nodes (``expr`` down to ``member``);
  cel-python's handler for each returns its child's value unchanged
  (``values = self.visit_children(tree); return values[0]``). The evaluator steps straight to the node
  that computes: about half the emulated apiserver's time went to climbing those chains.

Macro bodies (``all``, ``exists``, ``map``, ``filter``) run in this evaluator too: cel-python builds
their evaluator with its own class, not the caller's. The real apiserver is the judge of the emulation
itself: ``tests/e2e/test_intree_differential.py`` compares its verdicts with kube-apiserver's.
"""

from __future__ import annotations

from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import Evaluator

# grammar rules whose one-child form is a precedence level only (cel-python 0.5's grammar)
_PASS_THROUGH = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary", "member"}
)


class FastEvaluator(Evaluator):
    """cel-python's evaluator, with short-circuit ``&&``/``||`` and precedence chains skipped."""

    def _visit_tree(self, tree: lark.Tree) -> Any:
        try:
            target = tree._computes  # the parse trees are built once per expression and never changed
        except AttributeError:
            target = tree
            while target.data in _PASS_THROUGH and len(target.children) == 1:
                child = target.children[0]
                if not isinstance(child, lark.Tree):
                    break
                target = child
            tree._computes = target
        return super()._visit_tree(target)

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return type(self)(ast, activation=self.activation)

    def _logical(self, tree: lark.Tree, decided: bool, name: str) -> Any:
        if len(tree.children) == 1:
            return self.visit_children(tree)[0]
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and bool(left) is decided:
            return left
        right = self.visit(tree.children[1])
        try:
            return self.activation.resolve_function(name)(left, right)
        except TypeError as exc:
            return celpy.CELEvalError(f"no matching overload for {name}", exc.__class__, exc.args, tree=tree)

    def conditionaland(self, tree: lark.Tree) -> Any:
        return self._logical(tree, False, "_&&_")

    def conditionalor(self, tree: lark.Tree) -> Any:
        return self._logical(tree, True, "_||_")


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return FastEvaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


def environment(**kwargs: Any) -> celpy.Environment:
    """A ``celpy.Environment`` (same arguments) whose programs run on :class:`FastEvaluator`."""
    return celpy.Environment(runner_class=_Runner, **kwargs)
