"""Model quality from ground truth: what a prediction said, kept by request id
(`predicted`), and, once its label arrives, the pair folded into mergeable counts per variant
(`Outcomes`): a confusion table for classifiers (as the pairs counted, at most
`MAX_CLASSES` classes named; with, for two classes, how the positive
class's scores fall for each true class; for three to `MAX_OVR_CLASSES` (8), how each class's
scores fall for the rows of that class and of the others), error sums for regressors. Counts
written by any number of label posts merge into the same figures (`metrics`) as the pairs all
at once.

Plain NumPy: the request path and the Lambda API never import scikit-learn. AUC is the
Mann-Whitney rank statistic over the scores binned to `SCORE_BINS` (pairs in one bin count
half, as tied ranks do): exact when no positive and negative score fall within 1/SCORE_BINS
of each other, and off by at most half the share of pairs that do. A multi-class AUC is one
class against the rest, macro-averaged over the classes with both labelled rows of their own
and of others (scikit-learn's `roc_auc_score(multi_class="ovr", average="macro")`, which
needs every class among the labels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.monitor.sketches import merged_by

# NumPy is imported where used: sluice serve's supervisor reads this module.
if TYPE_CHECKING:
    from collections.abc import Iterable

    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature

CLASS, VALUE = "class", "value"
SCORE_BINS = 1000
# The classes a window's counts name, at most (and its positive class besides); see `_bound`.
# Labels are anyone's text: unbounded, one post's 10,000 distinct ones would each be kept, and
# read back with every read of the window.
MAX_CLASSES = 256
MAX_OVR_CLASSES = 8  # each class's scores are kept (a multi-class AUC) up to this many classes: a label post's bins stay well inside a DynamoDB item
MAX_OVR_VALUES = 4096  # and for requests of at most this many scores (rows x classes): a kept record stays small
MAX_LABEL = 1e100  # a regressor's label beyond this is refused: its squared error would overflow the window's sums


def predicted(signature: Signature, result: InferenceResult) -> dict[str, Any] | None:
    """What a request's rows predicted, JSON-able: `kind` (class or value), `predicted` (a
    label or a number per row) and, for a two-class model, `scores` (the probability of
    `positive`, its second class, per row); for three to `MAX_OVR_CLASSES` classes,
    `class_scores` (each row's probabilities, for requests of at most `MAX_OVR_VALUES`) and
    `classes`. A regressor's value that is not a finite number is null. None for answers that
    are neither (several values, vectors): their quality is not measured."""
    import numpy as np
    outputs = result.outputs
    label_spec, probs_spec = signature.output_with_role("label"), signature.output_with_role("probabilities")
    probs = outputs.get(probs_spec.name) if probs_spec else None
    label = outputs.get(label_spec.name) if label_spec else None
    classes: list[Any] | None = None
    if probs is not None and probs.ndim == 2:
        classes = result.classes.get(probs_spec.name) if probs_spec else None  # type: ignore[union-attr]
        if classes is None and (label is None or _indexed(label, probs)):
            classes = list(range(probs.shape[1]))  # the columns' indices name the classes
        # Else a label output beside probabilities without names (a classifier exported without
        # ZipMap) names its classes in an order nothing here says: taking the columns for "0" and
        # "1" made a model of classes 1 and 2 an AUC of 1 - AUC, and one of "no" and "yes" none.
        # No scores are kept that cannot be tied to a class.
    else:
        probs = None
    if label is not None or classes is not None:
        if label is not None:
            if label.size != len(label):
                return None
            values = label.reshape(-1)
        else:
            values = np.asarray(classes, dtype=object)[np.argmax(probs, axis=1)]
        doc: dict[str, Any] = {"kind": CLASS, "predicted": [_word(v) for v in values.tolist()]}
        if probs is not None and probs.shape[1] == 2 and classes is not None:
            doc["scores"] = np.round(probs[:, 1].astype(np.float64), 6).tolist()
            doc["positive"] = _word(classes[1])
        elif probs is not None and 2 < probs.shape[1] <= MAX_OVR_CLASSES and probs.size <= MAX_OVR_VALUES and classes is not None:
            doc["class_scores"] = np.round(probs.astype(np.float64), 6).tolist()
            doc["classes"] = [_word(c) for c in classes]
        return doc
    named = [spec.name for spec in signature.outputs if spec.name in outputs]
    if len(named) != 1:
        return None
    value = outputs[named[0]]
    if value.dtype.kind not in "fiub" or value.size != len(value):
        return None
    # A NaN or an infinity (a model's overflow) is kept as null: no error can be measured from it.
    said = value.reshape(-1).astype(np.float64)
    return {"kind": VALUE, "predicted": [v if math.isfinite(v) else None for v in said.tolist()]}


def _indexed(label: Any, probs: Any) -> bool:
    """Whether the label output names each row's class by its column: every row whose highest
    probability is its alone says that column's index, and the request has such a row for every
    column (one that showed only column 0 as "0" could not tell classes 0 and 1 from 0 and 2:
    taken as indices, a model of 0 and 2 had "1" for its positive class)."""
    import numpy as np

    if label.size != len(label) or len(label) != len(probs) or probs.shape[1] < 2:
        return False
    ordered = np.sort(probs, axis=1)
    clear = ordered[:, -1] > ordered[:, -2]
    if not clear.any():
        return False
    said = [_word(v) for v in label.reshape(-1)[clear].tolist()]
    columns = np.argmax(probs[clear], axis=1).tolist()
    return said == [str(i) for i in columns] and len(set(columns)) == probs.shape[1]


def finite(value: Any) -> bool:
    """A number a regressor's error can be measured from: not null (how `predicted` keeps a NaN
    or an infinity), NaN or an infinity (kept so before it did)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _word(value: Any) -> str:
    import numpy as np
    return class_word(value.item() if isinstance(value, np.generic) else value)


def class_word(value: Any) -> str:
    """A class as predictions and labels are compared: text, a whole number as one is written
    (a model's float label 1.0 and a posted label 1 or "1" are one class)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")  # two byte strings are two classes, whatever they hold
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(slots=True)
class Outcomes:
    """One variant's labelled predictions in one window, as counts."""

    kind: str
    rows: int = 0
    # (actual, predicted): n; None for a class past MAX_CLASSES (see `_bound`)
    pairs: dict[tuple[str | None, str | None], int] = field(default_factory=dict)
    hits: int = 0  # rows whose prediction was their label: exact, whatever was folded into "other"
    positive: str | None = None
    scores: dict[str, dict[int, int]] = field(default_factory=dict)  # "pos"/"neg": {bin: n}
    ovr: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)  # class: "pos"/"neg": {bin: n}
    abs_error: float = 0.0
    sq_error: float = 0.0
    error: float = 0.0  # signed: predicted - actual

    def _bound(self) -> None:
        """At most `MAX_CLASSES` classes named in the pairs, and the positive class: past them,
        those named are the `MAX_CLASSES` whose names hash lowest, and every other class,
        labelled or predicted, is one "other" (None). The hash, not the order they came in,
        picks them: a class named in the window is named in each post it came in too, so its
        hits, predictions and labels stay exact however the posts merge, and the classes named
        are a sample of them all, unbiased by when they came. "Other" is in `rows` and accuracy
        (`hits` is counted apart), never in a class's figure."""
        names = {c for pair in self.pairs for c in pair if c is not None}
        if self.positive is not None:
            names.discard(self.positive)
        if len(names) <= MAX_CLASSES:
            return
        kept = set(sorted(names, key=_rank)[:MAX_CLASSES])
        if self.positive is not None:
            kept.add(self.positive)
        folded: dict[tuple[str | None, str | None], int] = {}
        for (a, p), n in self.pairs.items():
            pair = (a if a in kept else None, p if p in kept else None)
            folded[pair] = folded.get(pair, 0) + n
        self.pairs = folded

    def add_class(
        self, actual: str, said: str, score: float | None = None, positive: str | None = None, class_scores: dict[str, float] | None = None
    ) -> None:
        """One labelled row; `score` of the `positive` class (two classes), or `class_scores`
        (each class's probability, more classes)."""
        self.rows += 1
        self.hits += actual == said
        self.pairs[(actual, said)] = self.pairs.get((actual, said), 0) + 1  # bound when written, merged or read
        if score is not None and positive is not None and (self.positive in (None, positive)):
            self.positive = positive
            side = self.scores.setdefault("pos" if actual == positive else "neg", {})
            b = _bin(score)
            side[b] = side.get(b, 0) + 1
        for name, p in (class_scores or {}).items():
            side = self.ovr.setdefault(name, {}).setdefault("pos" if actual == name else "neg", {})
            b = _bin(p)
            side[b] = side.get(b, 0) + 1

    def add_value(self, actual: float, said: float | None) -> bool:
        """One labelled row, counted where both are finite numbers within `MAX_LABEL` (True); a
        prediction of NaN or an infinity has no error to measure, and counted once it would make
        the window's sums, and so its MAE, RMSE and bias, NaN for good; one past `MAX_LABEL`
        (1e200, labelled 0) would make its squared error infinite, and the RMSE with it."""
        if not (finite(actual) and finite(said)) or abs(said) > MAX_LABEL or abs(actual) > MAX_LABEL:
            return False
        self.rows += 1
        diff = said - actual
        self.abs_error += abs(diff)
        self.sq_error += diff * diff
        self.error += diff
        return True

    def merge(self, other: Outcomes) -> None:
        self.rows += other.rows
        self.hits += other.hits
        for pair, n in other.pairs.items():
            self.pairs[pair] = self.pairs.get(pair, 0) + n
        if other.positive is not None and self.positive in (None, other.positive):
            self.positive = other.positive
            for side, bins in other.scores.items():
                mine = self.scores.setdefault(side, {})
                for b, n in bins.items():
                    mine[b] = mine.get(b, 0) + n
        for name, sides in other.ovr.items():
            for side, bins in sides.items():
                mine = self.ovr.setdefault(name, {}).setdefault(side, {})
                for b, n in bins.items():
                    mine[b] = mine.get(b, 0) + n
        self.abs_error += other.abs_error
        self.sq_error += other.sq_error
        self.error += other.error
        self._bound()

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "rows": self.rows}
        if self.kind == CLASS:
            self._bound()
            doc["pairs"] = [[a, p, n] for (a, p), n in self.pairs.items()]
            doc["hits"] = self.hits
            if self.positive is not None:
                doc["positive"] = self.positive
                doc["scores"] = {side: [[b, n] for b, n in bins.items()] for side, bins in self.scores.items()}
            if self.ovr:
                doc["ovr"] = {c: {side: [[b, n] for b, n in bins.items()] for side, bins in sides.items()} for c, sides in self.ovr.items()}
        else:
            doc.update(abs_error=self.abs_error, sq_error=self.sq_error, error=self.error)
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Outcomes:
        out = cls(doc["kind"], int(doc["rows"]), positive=doc.get("positive"))
        out.pairs = {(_name(a), _name(p)): int(n) for a, p, n in doc.get("pairs", [])}
        # Counts written before `hits` was: their pairs were never folded, so the diagonal is exact.
        out.hits = int(doc["hits"]) if "hits" in doc else sum(n for (a, p), n in out.pairs.items() if a == p and a is not None)
        out.scores = {side: {int(b): int(n) for b, n in bins} for side, bins in doc.get("scores", {}).items()}
        out.ovr = {str(c): {side: {int(b): int(n) for b, n in bins} for side, bins in sides.items()} for c, sides in doc.get("ovr", {}).items()}
        out.abs_error, out.sq_error, out.error = (float(doc.get(k, 0.0)) for k in ("abs_error", "sq_error", "error"))
        return out

    def metrics(self) -> dict[str, Any]:
        """rows, and accuracy, precision, recall and AUC for a classifier; MAE, RMSE and bias
        (mean of predicted - actual) for a regressor.

        Precision and recall are the positive class's where it is known (a two-class model's
        second class; else, of exactly two classes seen by a model not known to have more, the
        later): its hits over its
        predictions and over its labels, None where there are none (a window that neither
        predicted nor labelled it has no such figure, and a gate on it holds), whatever other
        labels came. Else the mean over the classes seen (macro), a class never predicted (or
        never labelled) counting 0, as scikit-learn's does; past `MAX_CLASSES` classes, over the
        classes named. AUC: two classes with scores; more classes with each class's scores,
        one against the rest, macro. Counted from the pairs in one pass: no table of classes
        by classes."""
        if not self.rows:
            return {"rows": 0}
        if self.kind == VALUE:
            return {"rows": self.rows, "mae": self.abs_error / self.rows, "rmse": math.sqrt(self.sq_error / self.rows), "bias": self.error / self.rows}
        self._bound()
        hits: dict[str, int] = {}
        said: dict[str, int] = {}
        actual: dict[str, int] = {}
        folded = False  # a pair with a class folded into "other" (None)
        for (a, p), n in self.pairs.items():
            if a is not None:
                actual[a] = actual.get(a, 0) + n
            else:
                folded = True
            if p is not None:
                said[p] = said.get(p, 0) + n
                if a == p:
                    hits[p] = hits.get(p, 0) + n
            else:
                folded = True
        out: dict[str, Any] = {"rows": self.rows, "accuracy": self.hits / self.rows}
        seen = sorted(actual.keys() | said.keys())
        # Of exactly two classes seen, the later, where the model is not known to have more (a
        # three-class model's window that saw two kept its macro figures, not one class's).
        two = len(seen) == 2 and not folded and not self.ovr
        positive = self.positive if self.positive is not None else (seen[-1] if two else None)
        if positive is not None:
            hit = hits.get(positive, 0)
            out.update(
                # No value only where the window neither predicted nor labelled the class (nothing
                # to judge); predicted but never labelled, or labelled but never predicted, reads
                # 0 for the figure with no denominator, as scikit-learn's zero_division=0: a
                # candidate that never finds a positive fails a precision gate, never holds it.
                precision=hit / said[positive] if said.get(positive) else (0.0 if actual.get(positive) else None),
                recall=hit / actual[positive] if actual.get(positive) else (0.0 if said.get(positive) else None),
                positive=positive,
            )  # fmt: skip
        else:  # macro: every class that was predicted or true counts once
            out.update(
                precision=sum(hits.get(c, 0) / said[c] for c in seen if said.get(c)) / len(seen) if seen else None,
                recall=sum(hits.get(c, 0) / actual[c] for c in seen if actual.get(c)) / len(seen) if seen else None,
            )  # fmt: skip
        out["auc"] = self.auc()
        return out

    def auc(self) -> float | None:
        import numpy as np
        if self.scores:
            return _auc(self.scores.get("pos"), self.scores.get("neg"))
        each = [_auc(sides.get("pos"), sides.get("neg")) for sides in self.ovr.values()]
        found = [a for a in each if a is not None]
        return float(np.mean(found)) if found else None


def _rank(name: str) -> bytes:
    """A class's place among those a window names past `MAX_CLASSES`: a hash of its name, the
    same in every process and every post (Python's own `hash` of text is not)."""
    import hashlib
    return hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _name(value: Any) -> str | None:
    """A class as the stored pairs write it; null for "other" (past `MAX_CLASSES`)."""
    return None if value is None else str(value)


def _bin(score: float) -> int:
    """A score's bin: [b/SCORE_BINS, (b+1)/SCORE_BINS), a score on that grid in its own bin."""
    if not math.isfinite(score):
        return 0
    return min(max(math.floor(score * SCORE_BINS + 1e-9), 0), SCORE_BINS - 1)


def _auc(pos: dict[int, int] | None, neg: dict[int, int] | None) -> float | None:
    """The Mann-Whitney statistic of binned positive and negative scores (ties: half)."""
    import numpy as np
    if not pos or not neg:
        return None
    p, n = np.zeros(SCORE_BINS), np.zeros(SCORE_BINS)
    for b, c in pos.items():
        p[b] += c
    for b, c in neg.items():
        n[b] += c
    below = np.cumsum(n) - n  # negatives in lower bins than each bin
    return float((p * (below + 0.5 * n)).sum() / (p.sum() * n.sum()))


def merged(docs: Iterable[dict[str, Any]]) -> dict[str, Outcomes]:
    """Documents of `{variant: Outcomes.to_dict()}` merged per variant."""
    return merged_by((variant, Outcomes.from_dict(part)) for doc in docs for variant, part in doc.items())
