"""Load a model from another framework and convert it to ONNX with its maintained converter:
scikit-learn (skl2onnx), XGBoost and LightGBM boosters (onnxmltools), PyTorch (torch.onnx).

This runs on the user's machine only, from `sluice models push`: loading a pickle runs code
from the file, which is why the service itself never loads one (it takes ONNX only).
Every converter is imported here, by the function that needs it, never by the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BadRequest, SluiceError

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

FORMATS = ("onnx", "sklearn", "xgboost", "lightgbm", "torchscript", "torch-export")
SUFFIXES = {
    ".onnx": "onnx", ".joblib": "sklearn", ".pkl": "sklearn", ".pickle": "sklearn",
    ".ubj": "xgboost", ".xgb": "xgboost", ".json": "xgboost", ".lgb": "lightgbm", ".txt": "lightgbm",
    ".pt": "torchscript", ".pth": "torchscript", ".pt2": "torch-export",
}  # fmt: skip
INSTALL = "pip install 'sluice[convert]'"
INPUT = "input"  # the converted model's input, as sluice's own models name it


class MissingConverter(SluiceError):
    code = "missing_converter"
    status = 400


@dataclass(slots=True)
class Loaded:
    """A model ready to convert: how to run the original, and what it takes."""

    format: str
    obj: Any
    kind: str  # "classifier" or "regressor" (torch: "module")
    n_features: int | None
    feature_names: list[str] | None
    predict: Callable[[np.ndarray], dict[str, np.ndarray]]  # rows -> {"label", "probabilities", "values"}
    objective: str | None = None  # a booster's, named when its converter refuses it


def format_of(path: Path, given: str | None) -> str:
    if given and given != "auto":
        if given not in FORMATS:
            raise BadRequest(f"--format must be one of {', '.join(FORMATS)}", field="format")
        return given
    found = SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise BadRequest(
            f"cannot tell what {path.name} holds from its name; give --format ({', '.join(FORMATS)})", field="format"
        )
    return found


def need(module: str, what: str) -> Any:
    """Import a converter, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        extra = "pip install torch onnxscript" if module.startswith(("torch", "onnxscript")) else INSTALL
        raise MissingConverter(f"{what} needs the '{module.split('.')[0]}' package: {extra}", field="file") from None


def load(path: Path, fmt: str) -> Loaded:
    """The user's model file, as its framework reads it; a file the framework cannot read is a
    400 naming it and saying so in a line (its loader's own first line, no native stack)."""
    loaders = {"sklearn": _sklearn, "xgboost": _xgboost_booster, "lightgbm": _lightgbm_booster}
    loader = loaders.get(fmt)
    if loader is None:
        return _torch(path, fmt)
    try:
        return loader(path)
    except (SluiceError, MemoryError, OSError):  # ours, or the machine's (tried again where a follow retries)
        raise
    except Exception as exc:  # pickle, joblib, a framework's native error: the file is not such a model
        said = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadRequest(f"{path.name} is not a {fmt} model this machine reads ({type(exc).__name__}: {said})", field="file") from None


# scikit-learn (and the XGBoost and LightGBM estimators that follow its API) -------------------
def _sklearn(path: Path) -> Loaded:
    joblib = need("joblib", "a scikit-learn model")
    need("sklearn", "a scikit-learn model")
    model = joblib.load(path)  # the user's own file, on the user's machine
    return estimator(model, path.name)


def from_object(model: Any, where: str) -> Loaded:
    """A model already loaded (by MLflow's own loader, `sluice.convert.mlflow_models`): a
    scikit-learn estimator, an XGBoost or LightGBM booster or estimator, or a torch module."""
    module = type(model).__module__
    if module.startswith("torch") or (hasattr(model, "state_dict") and hasattr(model, "forward")):
        return _torch_module(model)
    if module.startswith("xgboost") and not hasattr(model, "get_booster"):
        return _xgboost(model, _xgboost_kind(model), None)
    if module.startswith("lightgbm") and not hasattr(model, "booster_"):
        return _lightgbm(model, _lightgbm_kind(model), None)
    return estimator(model, where)


def estimator(model: Any, where: str) -> Loaded:
    """A scikit-learn estimator (or an XGBoost or LightGBM one, which follow its API)."""
    booster = _booster_of(model)
    if booster is not None:
        return booster
    if not hasattr(model, "predict"):
        raise BadRequest(f"{where} holds a {type(model).__name__}, not a fitted model", field="file")
    # A classifier without probabilities (LinearSVC, RidgeClassifier) is checked on its labels.
    classifier = hasattr(model, "classes_")
    scored = classifier and hasattr(model, "predict_proba")
    names = [str(n) for n in getattr(model, "feature_names_in_", [])] or None

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        import numpy as np

        if scored:
            return {"label": np.asarray(model.predict(x)), "probabilities": model.predict_proba(x)}
        if classifier:
            return {"label": np.asarray(model.predict(x))}
        return {"values": np.asarray(model.predict(x)).reshape(len(x), -1)}

    return Loaded("sklearn", model, "classifier" if classifier else "regressor",
                  getattr(model, "n_features_in_", None), names, predict)  # fmt: skip


def _booster_of(model: Any) -> Loaded | None:
    module = type(model).__module__
    if module.startswith("xgboost"):
        return _xgboost(model.get_booster(), "classifier" if hasattr(model, "classes_") else "regressor", model)
    if module.startswith("lightgbm"):
        return _lightgbm(model.booster_, "classifier" if hasattr(model, "classes_") else "regressor", model)
    return None


# XGBoost --------------------------------------------------------------------------------------
def _xgboost_booster(path: Path) -> Loaded:
    xgb = need("xgboost", "an XGBoost booster")
    booster = xgb.Booster()
    booster.load_model(str(path))
    return _xgboost(booster, _xgboost_kind(booster), None)


def _xgboost_objective(booster: Any) -> str:
    import json

    return str(json.loads(booster.save_config())["learner"]["objective"]["name"])


def _xgboost_kind(booster: Any) -> str:
    return "classifier" if _xgboost_objective(booster).startswith(("binary:", "multi:")) else "regressor"


def _xgboost(booster: Any, kind: str, estimator: Any) -> Loaded:

    xgb = need("xgboost", "an XGBoost booster")
    objective = _xgboost_objective(booster)
    labels = objective in ("multi:softmax", "binary:hinge")  # these predict classes, not probabilities

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        return _boosted(booster.predict(xgb.DMatrix(x)), kind, len(x), _classes(estimator), labels=labels)

    names = list(booster.feature_names) if booster.feature_names else None
    obj = estimator if estimator is not None else booster
    return Loaded("xgboost", obj, kind, booster.num_features(), names, predict, objective)


# LightGBM -------------------------------------------------------------------------------------
def _lightgbm_booster(path: Path) -> Loaded:
    lgb = need("lightgbm", "a LightGBM booster")
    booster = lgb.Booster(model_file=str(path))
    return _lightgbm(booster, _lightgbm_kind(booster), None)


def _lightgbm_objective(booster: Any) -> str:
    return str(booster.params.get("objective", booster.dump_model().get("objective", "")))


def _lightgbm_kind(booster: Any) -> str:
    objective = _lightgbm_objective(booster)
    return "classifier" if objective.startswith(("binary", "multiclass", "multiclassova")) else "regressor"


def _lightgbm(booster: Any, kind: str, estimator: Any) -> Loaded:
    import numpy as np

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        return _boosted(np.asarray(booster.predict(x)), kind, len(x), _classes(estimator))

    names = [n for n in booster.feature_name() if not n.startswith("Column_")] or None
    obj = estimator if estimator is not None else booster
    return Loaded("lightgbm", obj, kind, booster.num_feature(), names, predict, _lightgbm_objective(booster))


def _classes(estimator: Any) -> np.ndarray | None:
    """An estimator's classes (strings, or numbers other than 0..k-1), which its ONNX model answers."""
    import numpy as np

    classes = getattr(estimator, "classes_", None)
    return None if classes is None else np.asarray(classes)


def _boosted(raw: np.ndarray, kind: str, rows: int, classes: np.ndarray | None, *, labels: bool = False) -> dict[str, np.ndarray]:
    """A booster's raw predictions as the outputs checked against the ONNX model: values, a
    label (`labels`: the booster predicts classes), or a label and probabilities (a binary
    model's one column being the positive class's). A label is a class of `classes` when given."""
    import numpy as np

    if kind == "regressor":
        return {"values": raw.reshape(rows, -1)}
    if labels:
        index = raw.reshape(rows).astype(np.int64)
        return {"label": index if classes is None else classes[index]}
    probabilities = np.column_stack([1 - raw, raw]) if raw.ndim == 1 else raw
    index = probabilities.argmax(1)
    return {"label": index if classes is None else classes[index], "probabilities": probabilities}


# PyTorch --------------------------------------------------------------------------------------
def _torch(path: Path, fmt: str) -> Loaded:
    torch = need("torch", "a PyTorch module")
    if fmt == "torchscript":
        module = torch.jit.load(str(path), map_location="cpu").eval()
        n_features = None
    else:
        module = torch.export.load(str(path))
        example = module.example_inputs[0][0] if module.example_inputs else None
        n_features = int(example.shape[1]) if example is not None and example.ndim == 2 else None

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        with torch.no_grad():
            run = module.module() if fmt == "torch-export" else module
            out = run(torch.from_numpy(x))
        out = out[0] if isinstance(out, tuple | list) else out
        return {"values": out.detach().numpy().reshape(len(x), -1)}

    return Loaded(fmt, module, "module", n_features, None, predict)


def _torch_module(module: Any) -> Loaded:
    """A live `torch.nn.Module` (MLflow's pytorch flavor): exported as TorchScript files are."""
    torch = need("torch", "a PyTorch module")
    module.eval()

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        with torch.no_grad():
            out = module(torch.from_numpy(x))
        out = out[0] if isinstance(out, tuple | list) else out
        return {"values": out.detach().numpy().reshape(len(x), -1)}

    return Loaded("pytorch", module, "module", None, None, predict)


# To ONNX --------------------------------------------------------------------------------------
CONVERTERS = {"sklearn": "skl2onnx", "xgboost": "onnxmltools", "lightgbm": "onnxmltools"}


def to_onnx(loaded: Loaded, n_features: int, example: np.ndarray) -> bytes:
    """The model as ONNX. A converter refuses what it does not support (an estimator, an
    objective) by raising whatever it likes: that is a refusal naming the model, not a traceback."""
    try:
        return _to_onnx(loaded, n_features, example)
    except SluiceError:
        raise
    except Exception as exc:
        objective = f" with objective '{loaded.objective}'" if loaded.objective else ""
        raise BadRequest(
            f"{CONVERTERS.get(loaded.format, 'torch.onnx')} cannot convert this {type(loaded.obj).__name__}{objective} "
            f"to ONNX ({type(exc).__name__}); nothing was pushed", field="file",
        ) from exc  # fmt: skip


def _to_onnx(loaded: Loaded, n_features: int, example: np.ndarray) -> bytes:
    if loaded.format in ("torchscript", "torch-export", "pytorch"):
        return _torch_onnx(loaded, example)
    if loaded.format == "sklearn":
        skl2onnx = need("skl2onnx", "converting a scikit-learn model")
        from skl2onnx.common.data_types import FloatTensorType

        model = skl2onnx.convert_sklearn(loaded.obj, initial_types=[(INPUT, FloatTensorType([None, n_features]))])
        return model.SerializeToString()
    onnxmltools = need("onnxmltools", f"converting a {loaded.format} model")
    from onnxmltools.convert.common.data_types import FloatTensorType as MlFloat

    types = [(INPUT, MlFloat([None, n_features]))]
    convert = onnxmltools.convert_xgboost if loaded.format == "xgboost" else onnxmltools.convert_lightgbm
    if loaded.format == "xgboost":
        # onnxmltools reads an XGBoost model's feature names as `f0, f1, …`; named ones it cannot.
        booster = loaded.obj.get_booster() if hasattr(loaded.obj, "get_booster") else loaded.obj
        booster.feature_names = None
    model = convert(loaded.obj, initial_types=types)
    for output in model.graph.output:
        # onnxmltools declares a LightGBM classifier's label as [1]; every row gets one.
        dims = output.type.tensor_type.shape.dim
        if len(dims) == 1 and dims[0].dim_value == 1:
            dims[0].dim_param = "N"
    return model.SerializeToString()


def _torch_onnx(loaded: Loaded, example: np.ndarray) -> bytes:
    import tempfile

    torch = need("torch", "a PyTorch module")
    x = torch.from_numpy(example[:2])
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "model.onnx"
        if loaded.format in ("torchscript", "pytorch"):  # a module goes through the TorchScript exporter
            torch.onnx.export(
                loaded.obj, (x,), str(target), input_names=[INPUT], output_names=["output"],
                dynamic_axes={INPUT: {0: "batch"}, "output": {0: "batch"}}, dynamo=False,
            )  # fmt: skip
        else:
            need("onnxscript", "exporting a PyTorch program")
            program = torch.onnx.export(loaded.obj, input_names=[INPUT], output_names=["output"])
            program.save(str(target))
        return target.read_bytes()
