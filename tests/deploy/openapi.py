"""Validate Kubernetes objects against a real API server's OpenAPI v3 documents, the way
``kubectl apply --validate=strict`` does: types, required fields, enums, and no unknown fields
(except where the schema preserves them). The documents are in tests/fixtures/k8s-openapi-v3."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-openapi-v3"


@cache
def _index() -> dict[tuple[str, str, str], tuple[str, str]]:
    """(group, version, kind) -> (document file, schema name)."""
    found: dict[tuple[str, str, str], tuple[str, str]] = {}
    for path in sorted(DOCS.glob("*.json")):
        for name, schema in _schemas(path.name).items():
            for gvk in schema.get("x-kubernetes-group-version-kind") or []:
                found.setdefault((gvk["group"], gvk["version"], gvk["kind"]), (path.name, name))
    return found


@cache
def _schemas(document: str) -> dict[str, Any]:
    return json.loads((DOCS / document).read_text())["components"]["schemas"]


def known(api_version: str, kind: str) -> bool:
    group, _, version = api_version.rpartition("/")
    return (group, version, kind) in _index()


def validate(obj: Mapping[str, Any]) -> list[str]:
    """Every problem with ``obj`` as ``path: problem``; empty when the API server would accept it."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    where = _index().get((group, version, str(obj.get("kind"))))
    if where is None:
        return [f"{obj.get('apiVersion')}/{obj.get('kind')}: not a kind this API server serves"]
    document, name = where
    return list(_check(obj, {"$ref": f"#/components/schemas/{name}"}, document, str(obj.get("kind"))))


def _resolve(schema: Mapping[str, Any], document: str) -> Mapping[str, Any]:
    while True:
        if "$ref" in schema:
            schema = _schemas(document)[schema["$ref"].rsplit("/", 1)[1]]
        elif "allOf" in schema and len(schema["allOf"]) == 1 and "properties" not in schema:
            schema = schema["allOf"][0]
        else:
            return schema


def _check(value: Any, schema: Mapping[str, Any], document: str, path: str) -> Iterator[str]:
    schema = _resolve(schema, document)
    if "oneOf" in schema:
        if not any(not list(_check(value, option, document, path)) for option in schema["oneOf"]):
            yield f"{path}: {value!r} matches none of {[o.get('type') for o in schema['oneOf']]}"
        return
    kind = schema.get("type")
    if kind is None and "properties" in schema:
        kind = "object"
    if value is None:
        if not schema.get("nullable"):
            yield f"{path}: null is not allowed"
        return
    if kind == "object":
        yield from _object(value, schema, document, path)
    elif kind == "array":
        if not isinstance(value, list):
            yield f"{path}: expected a list, got {type(value).__name__}"
            return
        for i, item in enumerate(value):
            yield from _check(item, schema.get("items") or {}, document, f"{path}[{i}]")
    elif kind == "string":
        if not isinstance(value, str):
            yield f"{path}: expected a string, got {value!r}"
        elif "enum" in schema and value not in schema["enum"]:
            yield f"{path}: {value!r} is not one of {schema['enum']}"
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            yield f"{path}: expected an integer, got {value!r}"
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            yield f"{path}: expected a number, got {value!r}"
    elif kind == "boolean" and not isinstance(value, bool):
        yield f"{path}: expected true or false, got {value!r}"


def _object(value: Any, schema: Mapping[str, Any], document: str, path: str) -> Iterator[str]:
    if not isinstance(value, Mapping):
        yield f"{path}: expected an object, got {type(value).__name__}"
        return
    properties = schema.get("properties") or {}
    for field in schema.get("required") or []:
        if field not in value:
            yield f"{path}.{field}: required"
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in properties:
            yield from _check(item, properties[key], document, f"{path}.{key}")
        elif isinstance(extra, Mapping):
            yield from _check(item, extra, document, f"{path}.{key}")
        elif not extra and not schema.get("x-kubernetes-preserve-unknown-fields"):
            yield f"{path}.{key}: unknown field"
