"""A value is checked whole: Python's `$` also matches before a final newline, so a pattern
ending in `$` used with `re.match` took `name\\n` for `name`, and the value went on to a
SageMaker, CloudWatch or DynamoDB call, a header lookup or a file name that never matched.
Every pattern sluice compiles ends in `\\Z` (or is used with `fullmatch`), and every checker
below refuses a valid value with a line break added."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.convert.sagemaker_packages import parse_arn
from sluice.domain.errors import SluiceError
from sluice.domain.jobs import CatalogTarget, PublishTarget
from sluice.domain.policy import parse_policy
from sluice.domain.rollout_specs import check_alarms
from sluice.endpoints.image_uris import check_instance_type
from sluice.services.models import sagemaker_config

if TYPE_CHECKING:
    from collections.abc import Callable

SOURCE = Path(__file__).resolve().parents[2] / "functions" / "sluice"
LIVE = {"kind": "single", "model": "m", "version": 1}


def _precomputed(key: str) -> Any:
    return parse_policy({"kind": "precomputed", "table": "recs", "key": key, "live": LIVE})


def _switch(field: str) -> Any:
    return parse_policy({"kind": "switch", "cases": [{"name": "a", "when": {"field": field, "op": "==", "value": "a"}, "target": LIVE}], "default": LIVE})


# (what is checked, a valid value): each called with the value must pass, and with a line
# break added must be refused.
CHECKERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "alarm": (lambda v: check_alarms([v]), "sluice-api-5xx"),
    "instance type": (check_instance_type, "ml.g5.xlarge"),
    "sagemaker endpoint name": (lambda v: sagemaker_config({"endpoint_name": v}), "fraud-endpoint"),
    "model package arn": (parse_arn, "arn:aws:sagemaker:us-east-1:123456789012:model-package/fraud/3"),
    "precomputed key": (_precomputed, "headers.x-user-id"),
    "switch field": (_switch, "parameters.segment"),
    "publish table": (lambda v: PublishTarget.parse({"table": v, "key": "user"}), "recs"),
    "catalog table": (lambda v: CatalogTarget.parse({"database": "sluice", "table": v}), "scores"),
}


@pytest.mark.parametrize("name", sorted(CHECKERS))
@given(tail=st.sampled_from(["\n", "\r\n", "\n\n", "\r"]))
def test_a_valid_value_with_a_line_break_added_is_refused(name: str, tail: str) -> None:
    check, valid = CHECKERS[name]
    check(valid)
    with pytest.raises((SluiceError, ValueError)):
        check(valid + tail)


def _compiled_patterns() -> list[tuple[str, int, str]]:
    """Every literal pattern given to `re.compile`, `re.match` or `re.search` in sluice (the
    patterns pydantic reads run on Rust's regex, where `$` is the end of the text)."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("compile", "match", "search")):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args):
                continue
            first = node.args[0]
            text = first.value if isinstance(first, ast.Constant) else constants.get(first.id) if isinstance(first, ast.Name) else None
            if isinstance(text, str):
                found.append((str(path.relative_to(SOURCE)), node.lineno, text))
    return found


def test_no_pattern_sluice_matches_with_python_ends_in_a_dollar() -> None:
    patterns = _compiled_patterns()
    assert len(patterns) > 20  # the walk finds them
    assert [(where, line, text) for where, line, text in patterns if text.endswith("$") and not text.endswith("\\$")] == []
