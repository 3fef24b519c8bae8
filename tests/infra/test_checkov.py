"""checkov (an IaC scanner independent of cdk-nag) over the synthesized templates: every
failed check is either fixed or acknowledged, with a reason, in infra/checkov.yaml.

checkov pins many packages of its own, so it lives in `.venv-checkov` (`make checkov-env`,
which `make test` depends on) and runs as a subprocess, once for both test configurations.
"""

from __future__ import annotations

import json
import os
import subprocess
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra.synth import COMPONENTS, OPTIONAL, REPO, Synthesized

CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
BASELINE = REPO / "infra" / "checkov.yaml"

Finding = tuple[str, str, str]  # (check id, "<component>/<logical id>", check name)


def acknowledgements() -> list[dict[str, Any]]:
    return yaml.safe_load(BASELINE.read_text())["acknowledgements"]


def acknowledged(check: str, resource: str) -> bool:
    return any(
        entry["check"] == check and any(fnmatchcase(resource, p) for p in entry["resources"])
        for entry in acknowledgements()
    )


def run_checkov(templates: dict[Path, str]) -> tuple[list[Finding], int]:
    """Failed findings and the number of passed checks over `templates` (path -> component)."""
    if not CHECKOV.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHECKOV} is missing: `make test` builds it (make checkov-env)")
        pytest.skip("checkov is not installed: run `make checkov-env`")
    files = [arg for path in templates for arg in ("-f", str(path))]
    done = subprocess.run(
        [
            str(CHECKOV),
            *files,
            "--framework",
            "cloudformation",
            "--output",
            "json",
            "--compact",
            "--quiet",
            "--soft-fail",
            "--skip-download",  # no policy metadata from the vendor's platform
        ],
        capture_output=True,
        text=True,
        timeout=300,
        # One process: checkov forks a parser per core and pickles every parsed template back,
        # which on the suite's two busy cores costs more than it saves (the same report).
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "LOG_LEVEL": "WARNING", "CHECKOV_PARALLELIZATION_TYPE": "none"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    findings: list[Finding] = []
    passed = 0
    by_name = {path.name: component for path, component in templates.items()}
    for report in reports:
        passed += report["summary"]["passed"]
        for failed in report["results"]["failed_checks"]:
            component = by_name[Path(failed["file_path"]).name]
            logical_id = failed["resource"].split(".", 1)[1]
            findings.append((failed["check_id"], f"{component}/{logical_id}", failed["check_name"]))
    return findings, passed


def _templates(app: Synthesized, label: str, into: Path) -> dict[Path, str]:
    # The two apps share stack names: copy each template under a name of its own.
    found = {}
    for component in app.stacks:
        source = app.outdir / f"{app.config.name}-{component}.template.json"
        target = into / f"{label}-{component}.template.json"
        target.write_text(source.read_text())
        found[target] = component
    return found


@pytest.fixture(scope="module")
def scan(
    default_app: Synthesized, full_app: Synthesized, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Finding], int]:
    into = tmp_path_factory.mktemp("checkov")
    return run_checkov(
        _templates(default_app, "default", into) | _templates(full_app, "full", into)
    )


def test_every_finding_is_fixed_or_acknowledged(scan: tuple[list[Finding], int]) -> None:
    findings, passed = scan
    assert passed > 300, "checkov ran too few checks to be really checking"
    new = sorted({f for f in findings if not acknowledged(f[0], f[1])})
    listed = "\n".join(f"  {check} {resource}: {name}" for check, resource, name in new)
    assert not new, f"fix these or acknowledge them in infra/checkov.yaml:\n{listed}"


def test_every_acknowledgement_still_matches_a_finding(scan: tuple[list[Finding], int]) -> None:
    findings, _ = scan
    stale = [
        f"{entry['check']} {pattern}"
        for entry in acknowledgements()
        for pattern in entry["resources"]
        if not any(c == entry["check"] and fnmatchcase(r, pattern) for c, r, _ in findings)
    ]
    assert not stale, f"acknowledged in infra/checkov.yaml but no longer found: {stale}"


def test_every_acknowledgement_gives_a_reason() -> None:
    for entry in acknowledgements():
        assert entry["check"].startswith("CKV"), entry
        assert entry["resources"], entry["check"]
        assert len(str(entry.get("reason", "")).split()) >= 15, f"{entry['check']} needs a reason"
        for pattern in entry["resources"]:
            component = pattern.split("/", 1)[0]
            assert component in (*COMPONENTS, *OPTIONAL), f"{entry['check']}: {pattern} names no component"


def test_the_fixed_findings_stay_fixed(scan: tuple[list[Finding], int]) -> None:
    """What the review found and this app fixed must not come back acknowledged."""
    findings, _ = scan
    fixed = {"CKV_AWS_27", "CKV_AWS_21", "CKV_AWS_370"}
    assert not [f for f in findings if f[0] in fixed]
    unreserved = [r for c, r, _ in findings if c == "CKV_AWS_115"]
    assert all("/BucketNotificationsHandler" in r for r in unreserved), unreserved
