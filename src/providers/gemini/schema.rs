//! OpenAI tool `parameters` (JSON Schema, any draft) → the JSON Schema subset that
//! Gemini's `FunctionDeclaration.parametersJsonSchema` accepts.
//!
//! Source: Gemini API reference, `FunctionDeclaration` (`parametersJsonSchema`,
//! mutually exclusive with the OpenAPI-subset `parameters`), and the "Structured
//! output" guide's JSON Schema support list (November 2025: `anyOf`, `$ref`,
//! `minimum`/`maximum`, `additionalProperties`, `type: "null"`, `prefixItems`
//! added). Switchyard sends `parametersJsonSchema`, so `additionalProperties`,
//! `anyOf`, `$ref`/`$defs` and `type: "null"` go through as they are.
//!
//! Keywords kept: `type` (one name), `title`, `description`, `enum`, `format`,
//! `properties`, `required`, `additionalProperties`, `propertyOrdering`, `items`,
//! `prefixItems`, `minItems`, `maxItems`, `minimum`, `maximum`, `anyOf`, `$ref`,
//! `$defs`.
//!
//! Lowered:
//! 1. `type: [A, "null"]` → `anyOf: [{type: A, <A's keywords>}, {type: "null"}]`
//!    (the annotations `title`/`description` stay outside); `type: [A]` → `type: A`;
//!    `[A, B, ...]` → `anyOf` of bare types, other keywords kept beside it.
//! 2. `const: v` → `enum: [v]`.
//! 3. `oneOf` → `anyOf` (for the model choosing a value the two read the same).
//! 4. `allOf` → merged into its parent: keywords the parent lacks are copied,
//!    `properties` and `required` are unioned.
//! 5. `definitions` (drafts 4–7) → `$defs`, and `$ref: "#/definitions/X"` →
//!    `"#/$defs/X"`.
//! 6. Every other keyword (`$schema`, `$id`, `$comment`, `default`, `examples`,
//!    `pattern`, `minLength`, `maxLength`, `exclusiveMinimum`, `multipleOf`, `not`,
//!    `if`/`then`/`else`, `patternProperties`, `uniqueItems`, `strict`, ...) is
//!    dropped, with a debug log naming the tool and the keywords.
//!
//! A schema that needs none of this is sent as the client wrote it, borrowed.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::error::{Code, GatewayError};
use crate::providers::common::{field_error, unsupported_value};

/// Keywords Gemini's `parametersJsonSchema` takes.
const KEPT: [&str; 18] = [
    "type",
    "title",
    "description",
    "enum",
    "format",
    "properties",
    "required",
    "additionalProperties",
    "propertyOrdering",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "$ref",
    "$defs",
];

/// Deepest schema nesting lowered; deeper is refused (a schema that deep is an
/// attack or a bug, and recursion must stay bounded).
const MAX_DEPTH: usize = 64;

/// `schema` in the subset Gemini takes (see the module doc), borrowed when it
/// already is; `tool` is the index in `tools`, for errors and logs.
///
/// # Errors
/// 400 naming `tools[i].function.parameters` when the schema is not an object or
/// nests deeper than 64 levels.
pub(super) fn lower(schema: &Value, tool: usize) -> Result<Cow<'_, Value>, GatewayError> {
    let param = || format!("tools[{tool}].function.parameters");
    if !schema.is_object() {
        // As validation answers a `parameters` that is not a schema.
        return Err(field_error(
            Code::InvalidFunctionParameters,
            param(),
            "must be a JSON Schema object",
        ));
    }
    if !needs_lowering(schema, 0).map_err(|_| too_deep(param()))? {
        return Ok(Cow::Borrowed(schema));
    }
    let mut out = schema.clone();
    let mut dropped = Vec::new();
    lower_in_place(&mut out, 0, &mut dropped).map_err(|_| too_deep(param()))?;
    if !dropped.is_empty() {
        dropped.sort_unstable();
        dropped.dedup();
        tracing::debug!(
            tool,
            dropped = %dropped.join(","),
            "Gemini takes a JSON Schema subset: keywords dropped from the tool's parameters"
        );
    }
    Ok(Cow::Owned(out))
}

/// 400 `unsupported_value` naming `param`: a schema nested deeper than this
/// adapter lowers.
fn too_deep(param: String) -> GatewayError {
    let message = format!("`{param}` nests deeper than {MAX_DEPTH} levels");
    unsupported_value(param, message)
}

/// The nesting bound was passed.
struct TooDeep;

/// Calls `f` on each sub-schema of schema object `m`.
fn each_child<'v>(
    m: &'v Map<String, Value>,
    mut f: impl FnMut(&'v Value) -> Result<bool, TooDeep>,
) -> Result<bool, TooDeep> {
    for (k, v) in m {
        let hit = match (k.as_str(), v) {
            ("properties" | "$defs" | "definitions", Value::Object(props)) => {
                let mut any = false;
                for s in props.values() {
                    any |= f(s)?;
                }
                any
            }
            ("items" | "additionalProperties", Value::Object(_)) => f(v)?,
            ("items" | "prefixItems" | "anyOf" | "oneOf" | "allOf", Value::Array(list)) => {
                let mut any = false;
                for s in list {
                    any |= f(s)?;
                }
                any
            }
            _ => false,
        };
        if hit {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `v` (a schema) or any sub-schema uses something [`lower`] changes.
fn needs_lowering(v: &Value, depth: usize) -> Result<bool, TooDeep> {
    if depth > MAX_DEPTH {
        return Err(TooDeep);
    }
    let Value::Object(m) = v else {
        return Ok(false);
    };
    for (k, val) in m {
        if !KEPT.contains(&k.as_str()) || (k == "type" && !val.is_string()) {
            return Ok(true);
        }
        if k == "items" && val.is_array() {
            return Ok(true);
        }
    }
    each_child(m, |s| needs_lowering(s, depth + 1))
}

/// Lowers schema `v` and its sub-schemas, recording dropped keywords.
fn lower_in_place(v: &mut Value, depth: usize, dropped: &mut Vec<String>) -> Result<(), TooDeep> {
    if depth > MAX_DEPTH {
        return Err(TooDeep);
    }
    let Value::Object(m) = v else {
        return Ok(());
    };
    // 4. allOf merged into the parent (before the children are lowered, so the
    // merged keywords are lowered too).
    if let Some(Value::Array(all)) = m.remove("allOf") {
        for sub in all {
            let Value::Object(sub) = sub else { continue };
            for (k, val) in sub {
                match (k.as_str(), m.get_mut(&k), val) {
                    ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                        for (name, s) in theirs {
                            mine.entry(name).or_insert(s);
                        }
                    }
                    ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                        for r in theirs {
                            if !mine.contains(&r) {
                                mine.push(r);
                            }
                        }
                    }
                    (_, None, val) => {
                        m.insert(k, val);
                    }
                    _ => {}
                }
            }
        }
    }
    // 5. definitions → $defs.
    if let Some(defs) = m.remove("definitions") {
        match m.get_mut("$defs") {
            Some(Value::Object(mine)) => {
                if let Value::Object(theirs) = defs {
                    for (k, s) in theirs {
                        mine.entry(k).or_insert(s);
                    }
                }
            }
            _ => {
                m.insert("$defs".into(), defs);
            }
        }
    }
    if let Some(Value::String(r)) = m.get_mut("$ref") {
        if let Some(rest) = r.strip_prefix("#/definitions/") {
            *r = format!("#/$defs/{rest}");
        }
    }
    // 2. const → enum; 3. oneOf → anyOf.
    if let Some(c) = m.remove("const") {
        m.entry("enum").or_insert(Value::Array(vec![c]));
    }
    if let Some(one) = m.remove("oneOf") {
        m.entry("anyOf").or_insert(one);
    }
    // Old-draft tuple `items: [...]` is `prefixItems`.
    if m.get("items").is_some_and(Value::is_array) {
        if let Some(items) = m.remove("items") {
            m.entry("prefixItems").or_insert(items);
        }
    }
    // 6. Drop what Gemini does not take.
    m.retain(|k, _| {
        let keep = KEPT.contains(&k.as_str());
        if !keep {
            dropped.push(k.clone());
        }
        keep
    });
    // Children.
    for (k, val) in m.iter_mut() {
        match (k.as_str(), val) {
            ("properties" | "$defs", Value::Object(props)) => {
                for s in props.values_mut() {
                    lower_in_place(s, depth + 1, dropped)?;
                }
            }
            ("items" | "additionalProperties", s @ Value::Object(_)) => {
                lower_in_place(s, depth + 1, dropped)?
            }
            ("prefixItems" | "anyOf", Value::Array(list)) => {
                for s in list {
                    lower_in_place(s, depth + 1, dropped)?;
                }
            }
            _ => {}
        }
    }
    // 1. Type lists.
    if let Some(Value::Array(types)) = m.get("type") {
        let names: Vec<Value> = types.iter().filter(|t| t.is_string()).cloned().collect();
        let nullable = names.iter().any(|t| t == "null");
        let real: Vec<Value> = names.into_iter().filter(|t| t != "null").collect();
        m.remove("type");
        match (real.len(), nullable) {
            (0, true) => {
                m.insert("type".into(), Value::from("null"));
            }
            (0, false) => {}
            (1, false) => {
                m.insert("type".into(), real[0].clone());
            }
            (1, true) => {
                // The value's own keywords go in its branch; annotations stay out.
                let mut branch = Map::new();
                branch.insert("type".into(), real[0].clone());
                let keys: Vec<String> = m
                    .keys()
                    .filter(|k| !matches!(k.as_str(), "title" | "description" | "$defs"))
                    .cloned()
                    .collect();
                for k in keys {
                    if let Some(val) = m.remove(&k) {
                        branch.insert(k, val);
                    }
                }
                let null = serde_json::json!({"type": "null"});
                m.insert(
                    "anyOf".into(),
                    Value::Array(vec![Value::Object(branch), null]),
                );
            }
            _ => {
                let mut any: Vec<Value> = real
                    .into_iter()
                    .map(|t| serde_json::json!({ "type": t }))
                    .collect();
                if nullable {
                    any.push(serde_json::json!({"type": "null"}));
                }
                m.entry("anyOf").or_insert(Value::Array(any));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_schema_in_the_subset_is_borrowed_unchanged() {
        let s = json!({"type": "object", "properties": {"a": {"type": "string", "enum": ["x"]}, "b": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]}}, "required": ["a"], "additionalProperties": false, "$defs": {"B": {"type": "integer", "minimum": 1}}});
        assert!(matches!(lower(&s, 0).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn pydantic_style_schema_is_lowered_to_the_subset() {
        let s = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "type": "object",
            "properties": {
                "city": {"type": ["string", "null"], "description": "City", "minLength": 1, "default": null},
                "unit": {"const": "c"},
                "kind": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "pos": {"$ref": "#/definitions/Pos"},
                "pair": {"type": "array", "items": [{"type": "number"}, {"type": "number"}]},
                "many": {"type": ["string", "integer"]}
            },
            "allOf": [{"properties": {"extra": {"type": "boolean"}}, "required": ["extra"]}],
            "required": ["city"],
            "definitions": {"Pos": {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 0}}}}
        });
        let out = lower(&s, 3).unwrap();
        assert_eq!(
            out.into_owned(),
            json!({
                "title": "Args",
                "type": "object",
                "properties": {
                    "city": {"description": "City", "anyOf": [{"type": "string"}, {"type": "null"}]},
                    "unit": {"enum": ["c"]},
                    "kind": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    "pos": {"$ref": "#/$defs/Pos"},
                    "pair": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]},
                    "many": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    "extra": {"type": "boolean"}
                },
                "required": ["city", "extra"],
                "$defs": {"Pos": {"type": "object", "properties": {"x": {"type": "number"}}}}
            })
        );
    }

    #[test]
    fn a_nullable_object_keeps_its_properties_in_the_non_null_branch() {
        let s = json!({"type": "object", "properties": {"o": {"type": ["object", "null"], "description": "d", "properties": {"k": {"type": "string"}}, "required": ["k"]}}});
        let out = lower(&s, 0).unwrap().into_owned();
        assert_eq!(
            out["properties"]["o"],
            json!({"description": "d", "anyOf": [{"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}, {"type": "null"}]})
        );
    }

    #[test]
    fn non_object_and_too_deep_schemas_are_400_naming_the_tool() {
        let e = lower(&json!("string"), 2).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[2].function.parameters"));
        let mut deep = json!({"type": "string"});
        for _ in 0..70 {
            deep = json!({"type": "array", "items": deep});
        }
        let e = lower(&deep, 0).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].function.parameters"));
        assert_eq!(e.status(), 400);
    }
}
