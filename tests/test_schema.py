"""The ``[tool.cudaq]`` JSON schema and reference table: generated from the dataclasses, committed,
fresh, published to validate-pyproject, and in agreement with the settings validation."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from skbuild_cudaq import schema
from skbuild_cudaq.errors import SettingsError
from skbuild_cudaq.settings import CudaqSettings, DispatchKernelSettings, parse_settings

if TYPE_CHECKING:
    from validate_pyproject import api

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parent.parent
COMMITTED_SCHEMA = ROOT / "skbuild_cudaq" / "resources" / "cudaq.schema.json"
COMMITTED_DOCS = ROOT / "docs" / "reference" / "tool-cudaq.md"


def test_committed_schema_is_fresh() -> None:
    assert COMMITTED_SCHEMA.read_text(encoding="utf-8") == schema.schema_text(), (
        "regenerate: python -m skbuild_cudaq schema > skbuild_cudaq/resources/cudaq.schema.json"
    )


def test_committed_reference_table_is_fresh() -> None:
    assert COMMITTED_DOCS.read_text(encoding="utf-8") == schema.generate_markdown(), (
        "regenerate: python -m skbuild_cudaq schema --markdown > docs/reference/tool-cudaq.md"
    )


def test_schema_follows_the_dataclasses() -> None:
    generated = schema.generate_schema()
    assert generated["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert generated["$id"] == schema.SCHEMA_ID
    top = {f.name.replace("_", "-") for f in dataclasses.fields(CudaqSettings)}
    assert set(generated["properties"]) == top == {"dispatch-kernels", "compiler"}
    kernels = generated["properties"]["dispatch-kernels"]
    field, compiler_field = dataclasses.fields(CudaqSettings)
    assert kernels["description"] == field.metadata["help"]
    compiler = generated["properties"]["compiler"]
    assert compiler["description"] == compiler_field.metadata["help"]
    assert compiler["enum"] == ["auto", "nvcc", "nvrtc"]
    assert compiler["default"] == "auto"
    short, table = kernels["additionalProperties"]["oneOf"]
    assert short["type"] == "array"
    assert table["required"] == ["sources"]
    for f in dataclasses.fields(DispatchKernelSettings):
        assert table["properties"][f.name]["description"] == f.metadata["help"]
    assert table["properties"]["architectures"]["default"] == ["80"]


def test_get_schema_serves_the_committed_file() -> None:
    assert schema.get_schema("cudaq") == json.loads(COMMITTED_SCHEMA.read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match=r"only provides the schema of tool\.cudaq"):
        schema.get_schema("scikit-build")


def test_schema_is_published_through_the_validate_pyproject_entry_point() -> None:
    (entry,) = [
        e for e in entry_points(group="validate_pyproject.tool_schema") if e.name == "cudaq"
    ]
    assert entry.value == "skbuild_cudaq.schema:get_schema"
    assert entry.load()("cudaq") == schema.generate_schema()


def test_cli_prints_schema_and_table() -> None:
    def run(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "skbuild_cudaq", "schema", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert run() == schema.schema_text()
    assert run("--markdown") == schema.generate_markdown()


@pytest.fixture(scope="module")
def validator() -> api.Validator:
    """validate-pyproject with every installed plugin (ours comes through its entry point).

    An optional test dependency (the GPU machine lacks it): imported here, not at import.
    """
    api = pytest.importorskip("validate_pyproject.api")
    return api.Validator()


def pyproject(body: str) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads('[project]\nname = "demo"\nversion = "0.1"\n\n' + body)
    return data


GOOD = [
    pytest.param("", id="no-table"),
    pytest.param("[tool.cudaq]\n", id="empty"),
    pytest.param('[tool.cudaq.dispatch-kernels]\n_core = ["src/k.cu"]\n', id="short"),
    pytest.param(
        '[tool.cudaq.dispatch-kernels]\n"pkg._core" = { sources = ["src/k.cu", "src/j.cu"], '
        'architectures = [80, "sm_90", "lto_100", "120"] }\n',
        id="long",
    ),
]

# Problems a schema can see (types, keys, suffixes, architecture numbers), and the
# `tool.cudaq...` path validate-pyproject names.
BAD = [
    pytest.param("[tool]\ncudaq = 3\n", "tool.cudaq", id="not-a-table"),
    # an empty table declares nothing: a mistake (an entry left out or commented out)
    pytest.param("[tool.cudaq.dispatch-kernels]\n", "tool.cudaq.dispatch-kernels", id="no-kernels"),
    pytest.param(
        '[tool.cudaq.dispatch-kernel]\n_core = ["src/k.cu"]\n', "tool.cudaq", id="unknown-key"
    ),
    pytest.param(
        '[tool.cudaq.dispatch-kernels]\n_core = "src/k.cu"\n',
        "tool.cudaq.dispatch-kernels._core",
        id="string-entry",
    ),
    pytest.param(
        "[tool.cudaq.dispatch-kernels]\n_core = []\n",
        "tool.cudaq.dispatch-kernels._core",
        id="empty-entry",
    ),
    pytest.param(
        "[tool.cudaq.dispatch-kernels]\n_core = {}\n",
        "tool.cudaq.dispatch-kernels._core",
        id="no-sources",
    ),
    pytest.param(
        '[tool.cudaq.dispatch-kernels]\n_core = { sorces = ["src/k.cu"] }\n',
        "tool.cudaq.dispatch-kernels._core",
        id="misspelled-sources",
    ),
    pytest.param(
        '[tool.cudaq.dispatch-kernels]\n_core = ["src/k.cpp"]\n',
        "tool.cudaq.dispatch-kernels._core",
        id="not-cu",
    ),
    pytest.param(
        '[tool.cudaq.dispatch-kernels]\n_core = ["/opt/k.cu"]\n',
        "tool.cudaq.dispatch-kernels._core",
        id="absolute",
    ),
    pytest.param(
        '[tool.cudaq.dispatch-kernels]\n"a b" = ["src/k.cu"]\n',
        "tool.cudaq.dispatch-kernels",
        id="bad-target",
    ),
    pytest.param(
        '[tool.cudaq.dispatch-kernels]\nsources = ["src/k.cu"]\n',
        "tool.cudaq.dispatch-kernels",
        id="target-named-sources",
    ),
    *(
        pytest.param(
            f'[tool.cudaq.dispatch-kernels]\n_core = {{ sources = ["src/k.cu"], '
            f"architectures = [{arch}] }}\n",
            "tool.cudaq.dispatch-kernels._core",
            id=f"arch-{arch}",
        )
        for arch in ("75", '"sm_75"', '"90a"', '"native"', "true", '"8.0"')
    ),
]


@pytest.mark.parametrize("body", GOOD)
def test_validate_pyproject_accepts_good_tables(validator: api.Validator, body: str) -> None:
    validator(pyproject(body))


@pytest.mark.parametrize(("body", "where"), BAD)
def test_validate_pyproject_rejects_bad_tables(
    validator: api.Validator, body: str, where: str
) -> None:
    from validate_pyproject.error_reporting import ValidationError

    with pytest.raises(ValidationError) as info:
        validator(pyproject(body))
    assert f"`{where}" in str(info.value)


@pytest.mark.parametrize("body", GOOD)
def test_schema_and_settings_agree_on_good_tables(tmp_path: Path, body: str) -> None:
    for name in ("src/k.cu", "src/j.cu"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("// k\n")
    table = pyproject(body).get("tool", {}).get("cudaq", {})
    assert isinstance(parse_settings(table, tmp_path), CudaqSettings)


@pytest.mark.parametrize(("body", "where"), BAD)
def test_schema_and_settings_agree_on_bad_tables(tmp_path: Path, body: str, where: str) -> None:
    (tmp_path / "src").mkdir()
    for name in ("src/k.cu", "src/k.cpp"):
        (tmp_path / name).write_text("// k\n")
    with pytest.raises(SettingsError) as info:
        parse_settings(pyproject(body)["tool"]["cudaq"], tmp_path)
    assert all(p.key.startswith(where) for p in info.value.problems), info.value
