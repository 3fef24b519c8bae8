"""The checks of `sequence` and `switch` nodes against the models' signatures, made when a
policy is saved (`DeploymentService`): each a 422 naming the field of the policy at fault.

- a sequence's step takes every input from the previous step's answer, an output of the same
  name or the one its `map` names, of the same datatype and a shape that fits; what it
  `expose`s is an output of that step;
- a function step takes and gives what it declares: its inputs are checked as a model's;
- a lookup step gives what it takes and its features (and their event time, where it names an
  output for them); each of its keys reads an input it takes, one string or integer a row;
- a transform step derives what it gives from what it takes (its declared inputs, or the
  previous step's outputs), each op checked on the way (`domain.transform_specs.answer_specs`);
- a switch's cases and default take the switch's inputs; a condition on an input names one it
  has (a column within it, or one of its feature names) and compares it with a value of its
  type; a switch that decides row by row has cases that answer the same outputs (their rows
  are put together).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.domain.conditions import Compare, comparisons, reads_inputs
from sluice.domain.errors import Unprocessable
from sluice.domain.functions import Function
from sluice.domain.graphs import sequence_signature
from sluice.domain.lookups import Lookup
from sluice.domain.policy import Ensemble, Ref, Sequence, Shadow, Split, Switch
from sluice.domain.precomputed import Precomputed
from sluice.domain.signature import Signature
from sluice.domain.transform_specs import answer_specs
from sluice.domain.transforms import Transform

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain.policy import Node
    from sluice.domain.signature import TensorSpec

MAX_HOPS = 64


def fields_of(node: Node, field: str = "policy") -> list[tuple[str, Node]]:
    """Every node of the tree with its field, parents first (references not followed)."""
    children: list[tuple[str, Node]] = []
    if isinstance(node, Split):
        children = [(f"{field}.variants.{i}.target", v.target) for i, v in enumerate(node.variants)]
    elif isinstance(node, Shadow):
        children = [(f"{field}.primary", node.primary), *((f"{field}.mirrors.{i}.target", m.target) for i, m in enumerate(node.mirrors))]
    elif isinstance(node, Ensemble):
        children = [(f"{field}.members.{i}.target", m.target) for i, m in enumerate(node.members)]
    elif isinstance(node, Sequence):
        children = [(f"{field}.steps.{i}.target", s.target) for i, s in enumerate(node.steps)]
    elif isinstance(node, Switch):
        children = [*((f"{field}.cases.{i}.target", c.target) for i, c in enumerate(node.cases)), (f"{field}.default", node.default)]
    elif isinstance(node, Precomputed):
        children = [(f"{field}.live", node.live)]
    out = [(field, node)]
    for child_field, child in children:
        out += fields_of(child, child_field)
    return out


def leading_transform(node: Node, resolve: Callable[[str], Node]) -> Transform | Function | Lookup | None:
    """The transform, function or lookup a node's first branch starts with (a sequence's first
    step), whose declared inputs are what a caller sends; None when it starts with a model."""
    for _ in range(MAX_HOPS):
        if isinstance(node, Transform | Function | Lookup):
            return node
        if isinstance(node, Ref):
            node = resolve(node.deployment)
        elif node.kind == "single":
            return None
        else:
            node = node.children()[0]
    return None


class GraphChecks:
    """`takes(node)`: the signature of the version whose inputs the node takes (its first
    branch's); `resolve(name)`: a referenced deployment's policy."""

    def __init__(self, takes: Callable[[Node], Signature], resolve: Callable[[str], Node]) -> None:
        self.takes = takes
        self.resolve = resolve

    def answers(self, node: Node) -> Signature:
        """The signature of what `node` answers: a sequence's last step's (with what it
        exposes), else its first branch's."""
        for _ in range(MAX_HOPS):
            if isinstance(node, Ref):
                node = self.resolve(node.deployment)
            elif isinstance(node, Sequence):
                return sequence_signature(node, self.flow(node))
            elif node.kind == "single":
                return self.takes(node)
            else:
                node = node.children()[0]
        return self.takes(node)

    def flow(self, node: Sequence, field: str = "policy") -> list[Signature]:
        """What each step of a sequence answers, in order; a transform's derived (and checked)."""
        flow: list[Signature] = []
        for i, step in enumerate(node.steps):
            target = step.target
            if isinstance(target, Transform):
                takes = target.input_specs() if i == 0 else flow[-1].outputs
                gives = answer_specs(target, takes, field=f"{field}.steps.{i}.target")
                flow.append(Signature(takes if i == 0 else flow[-1].inputs, gives))
            elif isinstance(target, Lookup):
                takes = target.input_specs() if i == 0 else flow[-1].outputs
                problem = target.key_problem(takes)
                if problem is not None:
                    raise Unprocessable(problem[0], field=f"{field}.steps.{i}.target.keys.{problem[1]}")
                flow.append(Signature(takes if i == 0 else flow[-1].inputs, target.derive(takes)))
            elif isinstance(target, Function):  # what it declares; its inputs are checked as a model's are
                flow.append(Signature(target.signature.inputs if i == 0 else flow[-1].inputs, target.signature.outputs))
            else:
                flow.append(self.answers(target))
        return flow

    def check(self, root: Node) -> None:
        for field, node in reversed(fields_of(root)):  # inner nodes first: a refusal names the innermost field
            if isinstance(node, Sequence):
                self._sequence(node, field)
            elif isinstance(node, Switch):
                self._switch(node, field)
            elif isinstance(node, Precomputed) and node.source == "inputs":  # the key is an input the live node takes
                key = Compare(field=node.key, column=node.column, op="exists")
                _check_input(key, self.takes(node.live), f"{field}.key", what="the live node's")

    def _sequence(self, node: Sequence, field: str) -> None:
        flow = self.flow(node, field)
        for i in range(1, len(node.steps)):
            before, step = node.steps[i - 1], node.steps[i]
            if isinstance(step.target, Transform | Lookup):
                continue  # it takes every output of the previous step (checked in the flow)
            gives, takes = flow[i - 1], self.takes(step.target)
            where = f"{field}.steps.{i}"
            mapping = step.map or {}
            for name in mapping:
                if takes.input(name) is None:
                    raise Unprocessable(
                        f"step '{step.name}' has no input '{name}'; it takes {[s.name for s in takes.inputs]}", field=f"{where}.map.{name}"
                    )
            for spec in takes.inputs:
                source = mapping.get(spec.name, spec.name)
                at = f"{where}.map.{spec.name}" if spec.name in mapping else where
                output = gives.output(source)
                if output is None:
                    raise Unprocessable(
                        f"step '{step.name}' takes input '{spec.name}' from output '{source}' of step '{before.name}', which gives "
                        f"{[s.name for s in gives.outputs]}; name the output it takes in the step's map",
                        field=at,
                    )
                problem = _fits(output, spec)
                if problem:
                    raise Unprocessable(
                        f"output '{source}' of step '{before.name}' does not fit input '{spec.name}' of step '{step.name}': {problem}", field=at
                    )
        for j, exposed in enumerate(node.expose or ()):
            step_name, _, output = exposed.partition(".")
            gives = flow[next(i for i, s in enumerate(node.steps) if s.name == step_name)]
            if gives.output(output) is None:
                raise Unprocessable(
                    f"step '{step_name}' gives no output '{output}'; it gives {[s.name for s in gives.outputs]}", field=f"{field}.expose.{j}"
                )
            if flow[-1].output(exposed) is not None:  # the answer would hold two outputs of one name
                raise Unprocessable(f"'{exposed}' is also an output of the last step: an exposed output takes a name of its own", field=f"{field}.expose.{j}")

    def _switch(self, node: Switch, field: str) -> None:
        takes = self.takes(node)
        branches = [*((f"{field}.cases.{i}.target", f"case '{c.name}'", c.target) for i, c in enumerate(node.cases)), (f"{field}.default", "the default", node.default)]
        for where, label, target in branches:
            if self.takes(target).inputs != takes.inputs:
                raise Unprocessable(f"{label} takes different inputs from the rest of the switch", field=where)
        for i, case in enumerate(node.cases):
            for compare, _ in comparisons(case.when):
                if compare.source == "inputs":
                    _check_input(compare, takes, f"{field}.cases.{i}.when")
        if any(reads_inputs(c.when) for c in node.cases):
            first = self.answers(node.cases[0].target)
            shape = [(s.name, s.datatype, s.shape[1:]) for s in first.outputs]
            for where, label, target in branches[1:]:
                other = [(s.name, s.datatype, s.shape[1:]) for s in self.answers(target).outputs]
                if other != shape:
                    raise Unprocessable(
                        f"{label} answers {[s[0] for s in other]} and case '{node.cases[0].name}' answers {[s[0] for s in shape]} "
                        "(names, datatypes and shapes): a switch that decides by input values puts the rows its cases answer together",
                        field=where,
                    )


def _fits(output: TensorSpec, spec: TensorSpec) -> str | None:
    if output.datatype != spec.datatype:
        return f"it is {output.datatype}, the input takes {spec.datatype}"
    if len(output.shape) != len(spec.shape) or any(a != b and -1 not in (a, b) for a, b in zip(output.shape[1:], spec.shape[1:], strict=False)):
        return f"its shape {list(output.shape)} does not fit {list(spec.shape)}"
    return None


def _check_input(compare: Compare, takes: Signature, where: str, what: str = "the switch's") -> None:
    spec = takes.input(compare.name)
    if spec is None:
        raise Unprocessable(f"{what} inputs are {[s.name for s in takes.inputs]}: there is no input '{compare.name}'", field=where)
    width = 1
    for dim in spec.shape[1:]:
        width = -1 if dim == -1 or width == -1 else width * dim
    column = compare.column
    if isinstance(column, str):
        if column not in (spec.feature_names or ()):
            raise Unprocessable(f"input '{spec.name}' has no feature '{column}'; its features are {list(spec.feature_names or ())}", field=where)
    elif column is not None:
        if width != -1 and column >= width:
            raise Unprocessable(f"input '{spec.name}' has {width} columns: there is no column {column}", field=where)
    elif width != 1:
        raise Unprocessable(f"input '{spec.name}' has more than one value a row: name a column", field=where)
    text = spec.datatype == "BYTES"
    values = compare.value if isinstance(compare.value, list) else [] if compare.value is None else [compare.value]
    for value in values:
        if isinstance(value, str) != text:
            kind = "strings" if text else "numbers"
            raise Unprocessable(f"input '{spec.name}' holds {kind} ({spec.datatype}): {value!r} is not one", field=where)
    if text and compare.op in ("<", "<=", ">", ">="):
        raise Unprocessable(f"input '{spec.name}' holds strings: '{compare.op}' compares numbers", field=where)
