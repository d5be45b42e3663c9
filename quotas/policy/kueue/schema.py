"""Validate objects against their CRD's structural schema and CEL rules, as the API server would.

The validator is built from CRD documents (the cluster's own, or the bundled ``quotas/kueue_crds``).
It checks types, enums, required fields, patterns, bounds, list-map keys and unknown fields (as
``fieldValidation=Strict`` does), then evaluates every ``x-kubernetes-validations`` rule with a CEL
interpreter. Transition rules (those reading ``oldSelf``) run only when an old object is given,
as on an update.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import celpy
from celpy.adapter import json_to_cel

from .problems import ObjectProblem, Source

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TOP = ("apiVersion", "kind")
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


class CrdSchemas:
    """Schemas by (apiVersion, kind), read from CRD documents."""

    def __init__(self, crds: Iterable[Mapping[str, Any]]) -> None:
        self.schemas: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.scopes: dict[str, str] = {}
        for crd in crds:
            spec = crd["spec"]
            kind = spec["names"]["kind"]
            self.scopes[kind] = spec["scope"]
            for version in spec["versions"]:
                if version.get("served", True):
                    key = (f"{spec['group']}/{version['name']}", kind)
                    self.schemas[key] = version["schema"]["openAPIV3Schema"]

    def serves(self, objects: Iterable[Mapping[str, Any]]) -> bool:
        """Whether these schemas have every object's apiVersion and kind."""
        return all((str(o.get("apiVersion", "")), str(o.get("kind", ""))) in self.schemas for o in objects)

    def validate(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[ObjectProblem]:
        kind = str(obj.get("kind", ""))
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        found: list[ObjectProblem] = []

        def report(field: str, message: str, source: Source = Source.SCHEMA) -> None:
            found.append(ObjectProblem(kind, name, field, message, source, namespace))

        schema = self.schemas.get((str(obj.get("apiVersion", "")), kind))
        if schema is None:
            report("apiVersion", f"{obj.get('apiVersion')} {kind} is not served by these CRDs")
            return found
        _check_metadata(meta, self.scopes.get(kind) == "Namespaced", report)
        body = {k: v for k, v in obj.items() if k != "metadata"}
        old_body = {k: v for k, v in old.items() if k != "metadata"} if old else None
        _Walker(report).check(body, schema, "", old_body, top=True)
        return found


def _check_metadata(meta: Mapping[str, Any], namespaced: bool, report: Any) -> None:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        report("metadata.name", "Required value")
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        report("metadata.name", f"{name!r}: a lowercase RFC 1123 subdomain of at most 253 characters is required")
    namespace = meta.get("namespace")
    if namespaced and not namespace:
        report("metadata.namespace", "Required value: this kind is namespaced")
    if not namespaced and namespace:
        report("metadata.namespace", "this kind is cluster-scoped and takes no namespace")
    if namespace and (len(namespace) > 63 or not DNS_LABEL.match(namespace)):
        report("metadata.namespace", f"{namespace!r}: a lowercase RFC 1123 label is required")


class _Walker:
    def __init__(self, report: Any) -> None:
        self.report = report

    def check(self, value: Any, schema: Mapping[str, Any], path: str, old: Any, top: bool = False) -> None:
        if value is None:
            if not schema.get("nullable"):
                self.report(path or ".", "must not be null")
            return
        if not self._type_ok(value, schema, path):
            return
        self._bounds(value, schema, path)
        if isinstance(value, dict):
            self._object(value, schema, path, old if isinstance(old, dict) else None, top)
        elif isinstance(value, list):
            self._array(value, schema, path, old if isinstance(old, list) else None)
        for rule in schema.get("x-kubernetes-validations", ()):
            self._cel(rule, value, old, path)

    def _type_ok(self, value: Any, schema: Mapping[str, Any], path: str) -> bool:
        if schema.get("x-kubernetes-int-or-string"):
            ok = isinstance(value, (int, str)) and not isinstance(value, bool)
            if not ok:
                self.report(path, f"Invalid value: {value!r}: must be an integer or a string")
            return ok
        if "anyOf" in schema and "type" not in schema:
            if not any(self._matches_type(value, option) for option in schema["anyOf"]):
                self.report(path, f"Invalid value: {value!r}: matches none of the allowed types")
                return False
            return True
        expected = schema.get("type")
        if expected is None:
            return True
        if not self._matches_type(value, schema):
            self.report(path, f"Invalid value: {type(value).__name__}: must be of type {expected}")
            return False
        return True

    @staticmethod
    def _matches_type(value: Any, schema: Mapping[str, Any]) -> bool:
        expected = schema.get("type")
        if expected is None:
            return True
        if isinstance(value, bool) and expected != "boolean":
            return False
        return isinstance(value, _TYPES.get(expected, (object,)))

    def _bounds(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        if "enum" in schema and value not in schema["enum"]:
            allowed = ", ".join(f'"{v}"' for v in schema["enum"])
            self.report(path, f'Unsupported value: "{value}": supported values: {allowed}')
        if isinstance(value, str):
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.report(path, f"Too long: may not be more than {schema['maxLength']} bytes")
            if "minLength" in schema and len(value) < schema["minLength"]:
                self.report(path, f"Invalid value: must be at least {schema['minLength']} characters")
            if "pattern" in schema and not _regex(schema["pattern"]).search(value):
                self.report(path, f"Invalid value: {value!r}: should match '{schema['pattern']}'")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                self.report(path, f"Invalid value: {value}: should be greater than or equal to {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                self.report(path, f"Invalid value: {value}: should be less than or equal to {schema['maximum']}")
        if isinstance(value, (list, dict)):
            size = len(value)
            for key, word, bad in (
                ("maxItems", "items", size > schema.get("maxItems", size)),
                ("minItems", "items", size < schema.get("minItems", size)),
                ("maxProperties", "properties", size > schema.get("maxProperties", size)),
            ):
                if bad:
                    self.report(path, f"Too many or too few {word}: {key} is {schema[key]}, got {size}")

    def _object(
        self, value: dict[str, Any], schema: Mapping[str, Any], path: str, old: dict[str, Any] | None, top: bool
    ) -> None:
        properties = schema.get("properties", {})
        for required in schema.get("required", ()):
            if required not in value:
                self.report(_join(path, required), "Required value")
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            child_path = _join(path, key)
            child_old = old.get(key) if old else None
            if key in properties:
                self.check(child, properties[key], child_path, child_old)
            elif isinstance(extra, dict):
                self.check(child, extra, child_path, child_old)
            elif not (extra is True or schema.get("x-kubernetes-preserve-unknown-fields") or (top and key in _TOP)):
                self.report(child_path, f'unknown field "{child_path}"')

    def _array(self, value: list[Any], schema: Mapping[str, Any], path: str, old: list[Any] | None) -> None:
        items = schema.get("items", {})
        for i, item in enumerate(value):
            self.check(item, items, f"{path}[{i}]", None)
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            seen: set[tuple[Any, ...]] = set()
            for i, item in enumerate(value):
                key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)
                if key in seen:
                    self.report(f"{path}[{i}]", f"Duplicate value: {dict(zip(keys, key, strict=True))}")
                seen.add(key)
        elif list_type == "set" and len({repr(v) for v in value}) != len(value):
            self.report(path, "Duplicate value: items of a set must be unique")

    def _cel(self, rule: Mapping[str, Any], value: Any, old: Any, path: str) -> None:
        text = rule["rule"]
        uses_old = "oldSelf" in text
        if uses_old and old is None:
            return  # a transition rule: only evaluated on updates
        try:
            activation = {"self": json_to_cel(value)}
            if uses_old:
                activation["oldSelf"] = json_to_cel(old)
            result = _program(text).evaluate(activation)
        except Exception as exc:  # a rule that cannot be evaluated fails, as in the API server
            self.report(path or ".", f"rule {text!r} could not be evaluated: {exc}", Source.CEL)
            return
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            message = rule.get("message") or f"failed rule: {text}"
            self.report(path or ".", f"Invalid value: {message}", Source.CEL)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


INLINE_FLAGS = re.compile(r"\(\?([ims]+)\)")
"""Go's RE2 takes ``(?i)`` anywhere (the AdmissionCheck CRD writes ``^(?i)[a-z]…``); Python only at the start."""


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    flags = 0
    for letters in INLINE_FLAGS.findall(pattern):
        for letter in letters:
            flags |= {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}[letter]
    return re.compile(INLINE_FLAGS.sub("", pattern), flags)


_ENV = celpy.Environment()


@lru_cache(maxsize=512)
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule))
