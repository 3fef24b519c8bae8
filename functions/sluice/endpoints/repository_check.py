"""Checking a user's own Triton repository archive before SageMaker's container unpacks it.

What the container accepts (its `serve` script and Triton's repository rules): one or more
`<model>/config.pbtxt` with numbered version folders `<model>/<n>/...` at the top of the
archive, relative paths only, and one default model, the one
`SAGEMAKER_TRITON_DEFAULT_MODEL_NAME` names (or the only model there is), which is the one
the container loads and `/invocations` serves.
"""

from __future__ import annotations

import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sluice.domain.errors import InvalidInput
from sluice.endpoints import pbtxt

DEFAULT_MODEL_ENV = "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
MAX_CONFIG_BYTES = 1024 * 1024
# Triton declares every tensor with at least one dimension: a scalar (rank 0) has none to give.
SCALAR_ADVICE = "export the model with this tensor shaped [1], or with a batch axis ([batch])"
_VERSION = re.compile(r"0|[1-9][0-9]{0,17}")  # Triton ignores a version folder with a leading zero ("01")


@dataclass(frozen=True, slots=True)
class RepositoryCheck:
    models: tuple[str, ...]
    default_model: str

    @property
    def environment(self) -> dict[str, str]:
        """Container environment that makes the default model the one /invocations serves."""
        return {DEFAULT_MODEL_ENV: self.default_model}


def _read_config(model: str, text: str) -> str | None:
    """The model name a config.pbtxt declares at its top level (None: none, Triton then takes
    the folder's), read as Triton reads it: comments skipped, a `#` or an escaped quote inside
    a string kept, escapes such as `\\303\\250` read as the characters they spell. Refuses a
    tensor declared without dimensions, which Triton cannot load."""
    try:
        config = pbtxt.parse(text)
    except pbtxt.TextFormatError as exc:
        raise InvalidInput(f"{model}/config.pbtxt is not protobuf text format: {exc}", field="repository") from None
    for key, kind in (("input", "inputs"), ("output", "outputs")):
        for tensor in config.get(key, []):
            if not isinstance(tensor, dict):
                continue
            names = [n for n in tensor.get("name", []) if isinstance(n, str)]
            if "dims" in tensor and not tensor["dims"]:
                name = names[0] if names else "?"
                raise InvalidInput(
                    f"{model}/config.pbtxt declares {key} '{name}' with no dimensions (`dims: [ ]`), which Triton "
                    f"cannot load: {SCALAR_ADVICE}",
                    field=f"{kind}.{name}",
                )
    names = [n for n in config.get("name", []) if isinstance(n, str)]
    return names[-1] if names else None  # text format: the last value of a field wins


def _member_path(member: tarfile.TarInfo) -> PurePosixPath | None:
    name = member.name
    if name.startswith("/") or "\\" in name:
        raise InvalidInput(f"'{name}' is an absolute or Windows path; paths must be relative", field="repository")
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if ".." in parts:
        raise InvalidInput(f"'{name}' climbs out of the repository with '..'", field="repository")
    if member.issym() or member.islnk():
        raise InvalidInput(f"'{name}' is a link; the repository must hold plain files", field="repository")
    if not (member.isfile() or member.isdir()):
        raise InvalidInput(f"'{name}' is not a plain file or folder", field="repository")
    return PurePosixPath(*parts) if parts else None


def validate_repository_tarball(data: bytes | Path, default_model: str | None = None) -> RepositoryCheck:
    """Check a user's `model.tar.gz` has the layout SageMaker's Triton container accepts.

    One or more `<model>/config.pbtxt` with numbered version folders `<model>/<n>/...`, nothing
    outside relative paths, and a default model: the one given, or the only model there is.
    """
    raw = data.read_bytes() if isinstance(data, Path) else data
    try:
        tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:*")  # noqa: SIM115 (closed below)
    except (tarfile.TarError, OSError, EOFError):
        raise InvalidInput("the repository is not a tar archive (model.tar.gz)", field="repository") from None
    configs: dict[str, str] = {}
    versions: dict[str, set[str]] = {}
    top_dirs: set[str] = set()
    wrapped: set[str] = set()  # top folders holding <x>/<model>/config.pbtxt: one level too deep
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError):
            raise InvalidInput("the repository archive is truncated or corrupt", field="repository") from None
        for member in members:
            path = _member_path(member)
            if path is None:
                continue
            top = path.parts[0]
            if len(path.parts) == 1:
                if member.isfile():
                    if top == "config.pbtxt":
                        raise InvalidInput(
                            "config.pbtxt sits at the top of the archive; it belongs in <model>/config.pbtxt "
                            "(tar the repository's contents, not the model folder)",
                            field="repository",
                        )
                    raise InvalidInput(f"'{top}' is a file at the top of the archive; only model folders belong there", field="repository")
                top_dirs.add(top)
                continue
            top_dirs.add(top)
            second = path.parts[1]
            if len(path.parts) == 2 and second == "config.pbtxt" and member.isfile():
                if member.size > MAX_CONFIG_BYTES:
                    raise InvalidInput(f"{path} is larger than 1 MiB", field="repository")
                handle = tar.extractfile(member)
                configs[top] = handle.read().decode("utf-8", errors="replace") if handle else ""
            elif _VERSION.fullmatch(second) and (len(path.parts) > 2 or member.isdir()):
                versions.setdefault(top, set()).add(second)
            elif len(path.parts) == 3 and path.parts[2] == "config.pbtxt":
                wrapped.add(top)
    if not top_dirs:
        raise InvalidInput("the repository archive is empty", field="repository")
    for model in sorted(top_dirs):
        if model not in configs:
            hint = " (the archive wraps the repository in an extra folder; tar its contents)" if model in wrapped else ""
            raise InvalidInput(f"model folder '{model}' has no config.pbtxt{hint}", field="repository")
        if not versions.get(model):
            raise InvalidInput(
                f"model '{model}' has no numbered version folder such as {model}/1/ (Triton ignores one with a leading zero)",
                field="repository",
            )
        declared = _read_config(model, configs[model])
        if declared is not None and declared != model:
            raise InvalidInput(
                f"{model}/config.pbtxt names the model '{declared}'; Triton requires the folder's name",
                field="repository",
            )
    models = tuple(sorted(top_dirs))
    if default_model is None:
        if len(models) > 1:
            raise InvalidInput(
                f"the repository holds {len(models)} models ({', '.join(models)}); name the default one "
                f"({DEFAULT_MODEL_ENV}) that the endpoint serves",
                field="default_model",
            )
        default_model = models[0]
    elif default_model not in models:
        raise InvalidInput(
            f"default model '{default_model}' is not in the repository ({', '.join(models)})", field="default_model"
        )
    return RepositoryCheck(models, default_model)

