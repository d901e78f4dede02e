//! Hover and go to definition.

use lsp_types::{Location, Range, Url};

use super::analysis::{subject, Cursor, SetIndex, Subject};
use super::outline::DefKind;
use super::text::LineIndex;
use super::yaml;
use crate::policy::check::expr::FUNCTIONS;
use crate::policy::checked::{EpField, OutcomeField, ReqField, Ty};

/// The type as the reference writes it.
pub fn ty_name(t: Ty) -> &'static str {
    match t {
        Ty::Bool => "Bool",
        Ty::Int => "Int",
        Ty::Float => "Float",
        Ty::Str => "Str",
        Ty::Priority => "Priority",
    }
}

/// `(type, optional, doc)` of field `name` of namespace `ns`.
pub fn field(ns: &str, name: &str) -> Option<(Ty, bool, &'static str)> {
    match ns {
        "request" => ReqField::NAMED
            .iter()
            .find(|f| f.0 == name)
            .map(|f| (f.2, f.3, f.4)),
        "endpoint" => EpField::NAMED
            .iter()
            .find(|f| f.0 == name)
            .map(|f| (f.2, false, f.3)),
        _ => OutcomeField::NAMED
            .iter()
            .find(|f| f.0 == name)
            .map(|f| (f.2, false, f.3)),
    }
}

/// The hover text (markdown) and the range of the word it is about.
pub fn hover(ix: &SetIndex<'_>, offset: usize) -> Option<(String, Range)> {
    let file = ix.file();
    let c = Cursor::new(file, offset);
    if c.in_comment {
        return None;
    }
    let tok = c.code[c.at?];
    let range = LineIndex::new(&file.text).range(&file.text, tok.start, tok.end);
    let md = match subject(&c)? {
        Subject::Field(ns, name) => {
            let (ty, optional, doc) = field(ns, &name)?;
            let opt = if optional {
                "\n\nOptional: read it behind `has()` (`has(x) and x ...`)."
            } else {
                ""
            };
            format!(
                "```switchyard-policy\n{ns}.{name}: {}\n```\n{doc}{opt}",
                ty_name(ty)
            )
        }
        Subject::Function(name) => {
            let (_, sig, doc) = FUNCTIONS.iter().find(|f| f.0 == name)?;
            format!("```switchyard-policy\n{sig}\n```\n{doc}")
        }
        Subject::Strategy(name) => strategy_hover(ix, &name)?,
        Subject::Model(name) => model_hover(ix, &name)?,
        Subject::Endpoint(id) => {
            let e = ix.view.registry.endpoint(&id)?;
            format!(
                "**endpoint `{id}`** of model `{}`\n\n{}",
                e.model.name,
                endpoint_line(e.endpoint)
            )
        }
        Subject::Route(name) => def_hover(ix, DefKind::Route, &name)?,
        Subject::Rule(name) => def_hover(ix, DefKind::Rule, &name)?,
        Subject::StateSlot(name) => local_hover(ix, offset, &name, &[DefKind::State])?,
        Subject::Local(name) => local_hover(
            ix,
            offset,
            &name,
            &[DefKind::Param, DefKind::Let, DefKind::State],
        )?,
    };
    Some((md, range))
}

fn strategy_hover(ix: &SetIndex<'_>, name: &str) -> Option<String> {
    if name == crate::policy::check::BUILTIN_PRIORITY {
        return Some(
            "```switchyard-policy\nstrategy priority\n```\nThe built-in strategy (also when there is no `via`): registry priority ascending; among the endpoints of the lowest priority the first is drawn with probability proportional to `weight` (weight 0 is never drawn), the rest follow by weight descending, then config order. It cannot be redefined.".to_string(),
        );
    }
    let (fi, di) = *ix.defs(DefKind::Strategy, name).first()?;
    let f = &ix.files[fi];
    let d = &f.outline.defs[di];
    let doc = f.outline.doc_above(&f.text, d.span.0);
    let origin = if f.uri.is_none() {
        format!("\n\nBuilt-in (`examples/policies/{}`).", f.name)
    } else {
        String::new()
    };
    Some(format!(
        "```switchyard-policy\n{}\n```\n{doc}{origin}",
        ix.header(fi, di)
    ))
}

fn def_hover(ix: &SetIndex<'_>, kind: DefKind, name: &str) -> Option<String> {
    let (fi, di) = *ix.defs(kind, name).first()?;
    let f = &ix.files[fi];
    let doc = f.outline.doc_above(&f.text, f.outline.defs[di].span.0);
    Some(format!(
        "```switchyard-policy\n{}\n```\n{doc}",
        ix.header(fi, di)
    ))
}

fn local_hover(ix: &SetIndex<'_>, offset: usize, name: &str, kinds: &[DefKind]) -> Option<String> {
    let o = &ix.file().outline;
    let di = ix
        .locals(offset)
        .into_iter()
        .find(|&i| o.defs[i].name == name && kinds.contains(&o.defs[i].kind))?;
    let what = match o.defs[di].kind {
        DefKind::Param => "parameter",
        DefKind::Let => "per-endpoint value",
        _ => "state slot (Float per endpoint)",
    };
    Some(format!(
        "```switchyard-policy\n{}\n```\nStrategy {what}.",
        ix.header(ix.current, di)
    ))
}

fn endpoint_line(e: &crate::policy::RegistryEndpoint) -> String {
    let ctx = e
        .context_window
        .map_or("unknown".to_string(), |n| format!("{n} tokens"));
    format!(
        "provider `{}`, upstream model `{}`, priority {}, weight {}, USD {} / {} per 1M input / output tokens, context window {ctx}",
        e.provider, e.model, e.priority, e.weight, e.input_per_mtok, e.output_per_mtok
    )
}

fn model_hover(ix: &SetIndex<'_>, name: &str) -> Option<String> {
    let m = ix.view.registry.model(name)?;
    let mut s = format!("**model `{name}`**: {} endpoint(s)\n", m.endpoints.len());
    for e in &m.endpoints {
        s.push_str(&format!("\n- `{}`: {}", e.id, endpoint_line(e)));
    }
    Some(s)
}

/// Where the name under the cursor is defined.
pub fn definition(ix: &SetIndex<'_>, offset: usize) -> Vec<Location> {
    let c = Cursor::new(ix.file(), offset);
    if c.in_comment {
        return Vec::new();
    }
    let Some(s) = subject(&c) else {
        return Vec::new();
    };
    let defs = |kind, name: &str| -> Vec<Location> {
        ix.defs(kind, name)
            .into_iter()
            .filter_map(|(fi, di)| ix.location(fi, ix.files[fi].outline.defs[di].name_span))
            .collect()
    };
    match s {
        Subject::Strategy(n) => defs(DefKind::Strategy, &n),
        Subject::Route(n) => defs(DefKind::Route, &n),
        Subject::Rule(n) => defs(DefKind::Rule, &n),
        Subject::StateSlot(n) => local_def(ix, offset, &n, &[DefKind::State]),
        Subject::Local(n) => local_def(
            ix,
            offset,
            &n,
            &[DefKind::Param, DefKind::Let, DefKind::State],
        ),
        Subject::Model(n) => config_location(ix, yaml::model_offset, &n),
        Subject::Endpoint(id) => {
            let model = ix.view.registry.endpoint(&id).map(|e| e.model.name.clone());
            config_location(
                ix,
                |y, id| yaml::endpoint_offset(y, id, model.as_deref()),
                &id,
            )
        }
        Subject::Field(..) | Subject::Function(_) => Vec::new(),
    }
}

fn local_def(ix: &SetIndex<'_>, offset: usize, name: &str, kinds: &[DefKind]) -> Vec<Location> {
    let o = &ix.file().outline;
    ix.locals(offset)
        .into_iter()
        .filter(|&i| o.defs[i].name == name && kinds.contains(&o.defs[i].kind))
        .filter_map(|i| ix.location(ix.current, o.defs[i].name_span))
        .take(1)
        .collect()
}

/// Where `find` locates `name` in the set's `switchyard.yaml` (none without a
/// config file).
fn config_location(
    ix: &SetIndex<'_>,
    find: impl Fn(&str, &str) -> Option<usize>,
    name: &str,
) -> Vec<Location> {
    let Some(path) = &ix.view.config_path else {
        return Vec::new();
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Some(at) = find(&text, name) else {
        return Vec::new();
    };
    let Ok(uri) = Url::from_file_path(std::fs::canonicalize(path).unwrap_or(path.clone())) else {
        return Vec::new();
    };
    let li = LineIndex::new(&text);
    let end = at + name.len().min(text.len() - at);
    vec![Location::new(uri, li.range(&text, at, end))]
}
