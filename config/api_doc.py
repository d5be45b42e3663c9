"""The API reference page, rendered from the OpenAPI schema drf-spectacular serves at /api/schema/, so
the docs say what the running code answers: per resource (the schema's tags), each operation with its
description, parameters, request body fields and responses."""

from __future__ import annotations

from typing import Any

METHODS = ("get", "post", "put", "patch", "delete")


def openapi_schema() -> dict[str, Any]:
    """The schema as /api/schema/ serves it (Django must be set up)."""
    from drf_spectacular.generators import SchemaGenerator

    return dict(SchemaGenerator().get_schema(request=None, public=True))


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if not ref:
        return node
    found: Any = schema
    for part in ref.removeprefix("#/").split("/"):
        found = found[part]
    return dict(found)


def _type(schema: dict[str, Any], node: dict[str, Any]) -> str:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = _resolve(schema, node)
        if "enum" in target:
            return " / ".join(f"`{v}`" for v in target["enum"] if v not in ("", None))
        return name
    if "allOf" in node:
        return " & ".join(_type(schema, n) for n in node["allOf"])
    if "oneOf" in node:
        return " or ".join(_type(schema, n) for n in node["oneOf"])
    if node.get("type") == "array":
        return f"list of {_type(schema, node.get('items', {}))}"
    if "enum" in node:
        return " / ".join(f"`{v}`" for v in node["enum"] if v not in ("", None))
    kind = str(node.get("type", "object"))
    return f"{kind} ({node['format']})" if "format" in node else kind


def _cell(text: Any) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _fields(schema: dict[str, Any], node: dict[str, Any]) -> list[str]:
    target = _resolve(schema, node)
    props = target.get("properties") or {}
    if not props:
        return []
    required = set(target.get("required", []))
    rows = ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for name, prop in props.items():
        if prop.get("readOnly"):
            continue
        rows.append(
            f"| `{name}` | {_cell(_type(schema, prop))} | {'yes' if name in required else ''} "
            f"| {_cell(prop.get('description', ''))} |"
        )
    return rows if len(rows) > 2 else []


def _operation(schema: dict[str, Any], path: str, method: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if op.get("description"):
        out += [str(op["description"]).strip(), ""]
    params = [_resolve(schema, p) for p in op.get("parameters", [])]
    if params:
        out += ["| parameter | in | required | meaning |", "| --- | --- | --- | --- |"]
        out += [
            f"| `{p['name']}` | {p.get('in', '')} | {'yes' if p.get('required') else ''} "
            f"| {_cell(p.get('description', ''))} |"
            for p in params
        ]
        out.append("")
    body = (op.get("requestBody") or {}).get("content", {})
    media = body.get("application/json") or next(iter(body.values()), None)
    if media and media.get("schema"):
        rows = _fields(schema, media["schema"])
        if rows:
            out += ["Request body:", "", *rows, ""]
    answers = []
    for code, response in sorted(op.get("responses", {}).items()):
        content = (response.get("content") or {}).get("application/json", {})
        what = _type(schema, content["schema"]) if content.get("schema") else ""
        answers.append(
            f"`{code}` {what}".strip() + (f" — {_cell(response['description'])}" if response.get("description") else "")
        )
    if answers:
        out += ["Answers: " + "; ".join(answers) + ".", ""]
    return out


def api_markdown(schema: dict[str, Any] | None = None) -> str:
    """The whole reference: an introduction, then one section per tag, operations in path order."""
    schema = schema or openapi_schema()
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in sorted(schema.get("paths", {}).items()):
        for method in METHODS:
            if method in item:
                op = item[method]
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
    count = sum(len(ops) for ops in by_tag.values())
    info = schema.get("info", {})
    out = [
        "# API reference",
        "",
        f"{info.get('description', '')}",
        "",
        f"Version {info.get('version', '')}: {count} operations, generated from the OpenAPI schema the",
        "running server serves at `/api/schema/` (browse it at `/api/docs/`). Every write takes a `reason`;",
        'errors name the field and the fix (`{"field": ["what is wrong: what to do"]}`).',
        "",
    ]
    for tag in sorted(by_tag):
        out += [f"## {tag}", ""]
        for path, method, op in by_tag[tag]:
            out += _operation(schema, path, method, op)
    return "\n".join(out)
