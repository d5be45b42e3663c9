"""The API reference page is rendered from the schema the server serves: every operation is on it, with
its parameters and the fields its body takes."""

from __future__ import annotations

from config.api_doc import METHODS, api_markdown, openapi_schema


def test_every_operation_of_the_schema_is_on_the_page():
    schema = openapi_schema()
    page = api_markdown(schema)
    operations = [(m, p) for p, item in schema["paths"].items() for m in METHODS if m in item]
    assert len(operations) > 60
    for method, path in operations:
        assert f"### `{method.upper()} {path}`" in page
    assert f"{len(operations)} operations" in page


def test_a_write_lists_its_body_fields_and_a_read_its_filters():
    page = api_markdown()
    quotas = page[page.index("### `POST /api/v1/quotas/bulk/`") :]
    quotas = quotas[: quotas.index("\n### ")]
    assert "| `reason` |" in quotas and "| `changes` |" in quotas
    audit = page[page.index("### `GET /api/v1/audit/`") :]
    audit = audit[: audit.index("\n### ")]
    assert "| `within` | query |  | A unit path: events of it and its subtree. |" in audit
