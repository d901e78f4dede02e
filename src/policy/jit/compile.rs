//! The compile driver: checked set → layout + lowered functions → one finalized
//! module ([`JitCode`]).
//!
//! Compiled per set:
//! - one selection function (routes, `set priority`, rules; see [`SelRoute`]);
//! - per canary arm with a `rollback` guard: the guard, per endpoint;
//! - per distinct (strategy, argument values) used by some `use`: a filter function
//!   (bit 0: every `require` holds, bit 1: every `prefer` holds), one function per
//!   aggregate argument, the score, and one function per `on pick/success/failure`
//!   assignment. Parameters are constants in each instance.
//!
//! Host-side (in [`super::run`]): feature vectors, split buckets (FNV-1a / SplitMix64
//! over strings), candidate lists, state initialization and `join mean`, aggregate
//! reductions, pick, ordering and the plan.

use std::collections::BTreeMap;

// Looked up on every decision (use sites, guards): FxHash, as for the rule index (the
// keys are small integers of the set itself).
use rustc_hash::FxHashMap as HashMap;

use crate::policy::ast::Event;
use crate::policy::checked::*;

use super::codegen::{Builder, SelIndex, SelRoute, SelRule, SelSetPrio};
use super::index::{self, KeyScope, RouteIndex, INDEX_MIN_RULES};
use super::ir::{LTy, Node, Slot, Vector};
use super::layout::{prio_code, EpSlot, Layout, ReqFill, ReqSlot, Strings};
use super::lower::{Lowerer, PrioFrom, Scope};
use super::native::{discard, new_module, Native, Shape};

/// Sets with more rules than this compile with cranelift's `none` optimization level
/// (halves compile time; the selection code is already straight jumps).
pub const OPTIMIZE_UP_TO_RULES: usize = 200;

/// Code generation choices (defaults: [`JitOptions::default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitOptions {
    /// Routes with at least this many rules (default included) get a rule index
    /// ([`super::index`]); `usize::MAX` turns indexing off, 0 indexes every route.
    pub index_min_rules: usize,
}

impl Default for JitOptions {
    fn default() -> JitOptions {
        JitOptions {
            index_min_rules: INDEX_MIN_RULES,
        }
    }
}

/// Arm index of a `use` that is not inside a split.
pub const NO_ARM: u32 = u32::MAX;

/// Compiled functions of one strategy instance (handles into [`Native`]).
#[derive(Debug)]
pub struct StratCode {
    /// Strategy index.
    pub strategy: u32,
    /// Filter function.
    pub filter: usize,
    /// Aggregates: (index, function, argument function, and the endpoint cell the
    /// argument is when it is nothing but one number of the endpoint vector, such
    /// as `state.served` or `endpoint.weight`: the host then reads that column
    /// instead of calling the argument's code once per candidate, [`AggColumn`]).
    pub aggs: Vec<(u32, AggFn, usize, Option<AggColumn>)>,
    /// Score function.
    pub score: usize,
    /// Per event: (slot, function) in assignment order.
    pub updates: Vec<(Event, Vec<(u32, usize)>)>,
    /// The endpoint cells these functions read (ascending): the only ones the host
    /// fills for them ([`super::layout::Layout::fill_ep_cells`]).
    pub cells: Vec<u32>,
    /// Whether an aggregate's argument reads `score` or `probability` (`on` blocks).
    /// If not, the aggregates an `on pick` block sees equal the ranking's when every
    /// candidate was scored, and the host reuses them instead of evaluating each
    /// aggregate over every candidate a second time.
    pub aggs_read_scored: bool,
}

/// An aggregate's argument that is one cell of the endpoint vector, read as the
/// argument's code would read it: an `f64` cell as is, an integer cell converted to
/// the nearest `f64` (Rust's `as`, the same rounding as the code's conversion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggColumn {
    /// Index of the cell in the endpoint vector (`u64` units).
    pub cell: u32,
    /// The cell holds an integer (`i64` bits), not an `f64`.
    pub int: bool,
}

impl AggColumn {
    /// The column an aggregate argument's lowered form `n` reads, if it is only a
    /// load of an endpoint cell (as a float, or an integer converted to one).
    pub fn of(n: &Node) -> Option<AggColumn> {
        let ep = |slot: &Slot| (slot.vector == Vector::Ep).then_some(slot.index);
        match n {
            Node::Load(slot, LTy::F) => Some(AggColumn {
                cell: ep(slot)?,
                int: false,
            }),
            Node::ToFloat(inner) => match &**inner {
                Node::Load(slot, LTy::I) => Some(AggColumn {
                    cell: ep(slot)?,
                    int: true,
                }),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A compiled set: code, the layout it reads, and where each use site's code is.
pub struct JitCode {
    /// The finalized functions.
    pub native: Native,
    /// Vector layout.
    pub layout: Layout,
    /// How the host fills the request vector (from `layout`).
    pub req_fill: ReqFill,
    /// String ids.
    pub strings: Strings,
    /// The selection function.
    pub select: usize,
    /// Rollback guards by (route, rule, arm).
    pub guards: HashMap<(u32, u32, u32), usize>,
    /// Strategy instance by use site (route, rule, arm or [`NO_ARM`]).
    pub sites: HashMap<(u32, u32, u32), usize>,
    /// Strategy instance by (strategy, argument bits), for outcome updates.
    pub by_args: HashMap<(u32, Vec<u64>), usize>,
    /// Instances.
    pub instances: Vec<StratCode>,
    /// Rule indexes of the indexed routes; the host fills their masks per request.
    pub index: Vec<RouteIndex>,
    /// Machine code bytes of all functions.
    pub code_bytes: usize,
}

/// Argument values as a hashable key.
pub fn args_key(args: &[Const]) -> Vec<u64> {
    let mut k = Vec::with_capacity(args.len() * 2);
    for a in args {
        let (tag, bits) = match a {
            Const::Bool(v) => (0, u64::from(*v)),
            Const::Int(i) => (1, *i as u64),
            Const::Float(f) => (2, f.to_bits()),
            Const::Str(s) => (3, u64::from(s.0)),
            Const::Priority(p) => (4, prio_code(*p)),
        };
        k.push(tag);
        k.push(bits);
    }
    k
}

fn children(e: &TExpr) -> Vec<&TExpr> {
    match &e.kind {
        TExprKind::ToFloat(x) | TExprKind::Not(x) | TExprKind::Neg(x) => vec![x],
        TExprKind::In(x, ..) | TExprKind::Match(_, x, _) | TExprKind::Agg(_, _, x) => vec![x],
        TExprKind::And(x, y) | TExprKind::Or(x, y) => vec![x, y],
        TExprKind::Arith(_, x, y) | TExprKind::Cmp(_, x, y) => vec![x, y],
        TExprKind::If(c, x, y) => vec![c, x, y],
        TExprKind::Math(_, args) => args.iter().collect(),
        _ => Vec::new(),
    }
}

fn collect_aggs<'e>(e: &'e TExpr, out: &mut BTreeMap<u32, (AggFn, &'e TExpr)>) {
    if let TExprKind::Agg(f, i, arg) = &e.kind {
        out.insert(*i, (*f, arg));
    }
    for c in children(e) {
        collect_aggs(c, out);
    }
}

struct Pending<'s> {
    fns: Vec<(Shape, Node)>,
    select: Vec<SelRoute>,
    guards: HashMap<(u32, u32, u32), usize>,
    sites: HashMap<(u32, u32, u32), usize>,
    by_args: HashMap<(u32, Vec<u64>), usize>,
    instances: Vec<StratCode>,
    set: &'s CheckedPolicySet,
}

impl Pending<'_> {
    fn push(&mut self, n: Node) -> usize {
        self.fns.push((Shape::Expr, n));
        self.fns.len() - 1
    }

    fn instance(&mut self, lo: &mut Lowerer<'_>, u: &CUse) -> Result<Option<usize>, String> {
        let Some(si) = u.strategy else {
            return Ok(None);
        };
        let key = (si, args_key(&u.args));
        if let Some(i) = self.by_args.get(&key) {
            return Ok(Some(*i));
        }
        let s = self
            .set
            .strategies
            .get(si as usize)
            .ok_or("a use names a missing strategy")?;
        let sc = Scope {
            prio: PrioFrom::Req,
            endpoint: true,
            strategy: Some((s, &u.args)),
        };
        let e = |r: Result<Node, super::lower::LowerError>| r.map_err(|e| e.0);
        let mark = lo.layout.ep_mark();
        let all = |lo: &mut Lowerer<'_>, v: &[TExpr]| -> Result<Node, String> {
            let mut acc = Node::Bool(true);
            for x in v.iter().rev() {
                lo.start_function();
                acc = Node::And(Box::new(e(lo.cond(x, &sc))?), Box::new(acc));
            }
            Ok(acc)
        };
        let req = all(lo, &s.require)?;
        let pref = all(lo, &s.prefer)?;
        let bits = |v: i64| Box::new(Node::Int(v));
        let filter = Node::If(
            LTy::I,
            Box::new(req),
            Box::new(Node::If(LTy::I, Box::new(pref), bits(3), bits(1))),
            bits(0),
        );
        let filter = self.push(filter);
        let mut found = BTreeMap::new();
        for (_, l) in &s.lets {
            collect_aggs(l, &mut found);
        }
        collect_aggs(&s.score, &mut found);
        for (_, assigns) in &s.updates {
            for (_, x) in assigns {
                collect_aggs(x, &mut found);
            }
        }
        let mut aggs = Vec::new();
        let agg_mark = lo.layout.ep_mark();
        for (i, (f, arg)) in found {
            lo.start_function();
            let n = e(lo.number(arg, &sc))?;
            let column = AggColumn::of(&n);
            aggs.push((i, f, self.push(n), column));
        }
        let aggs_read_scored = lo.layout.ep_reads_since(agg_mark).iter().any(|&c| {
            matches!(
                lo.layout.ep.get(c as usize),
                Some(EpSlot::Score | EpSlot::Probability)
            )
        });
        lo.start_function();
        let score = e(lo.number(&s.score, &sc))?;
        let score = self.push(score);
        let mut updates = Vec::new();
        for (ev, assigns) in &s.updates {
            let mut v = Vec::new();
            for (slot, x) in assigns {
                lo.start_function();
                let n = e(lo.number(x, &sc))?;
                v.push((*slot, self.push(n)));
            }
            updates.push((*ev, v));
        }
        self.instances.push(StratCode {
            strategy: si,
            filter,
            aggs,
            score,
            updates,
            cells: lo.layout.ep_reads_since(mark),
            aggs_read_scored,
        });
        let i = self.instances.len() - 1;
        self.by_args.insert(key, i);
        Ok(Some(i))
    }
}

fn sel_prio(
    lo: &mut Lowerer<'_>,
    sps: &[CSetPriority],
    sc: &Scope<'_>,
) -> Result<Vec<SelSetPrio>, String> {
    sps.iter()
        .map(|sp| {
            Ok(SelSetPrio {
                when: match &sp.when {
                    Some(w) => Some(lo.cond(w, sc).map_err(|e| e.0)?),
                    None => None,
                },
                level: prio_code(sp.level) as i64,
            })
        })
        .collect()
}

/// Compiles `set`; any failure is a message (the caller falls back to the
/// interpreter).
pub fn compile(set: &CheckedPolicySet, opts: JitOptions) -> Result<JitCode, String> {
    let mut layout = Layout::default();
    let strings = Strings::new(set);
    let mut p = Pending {
        fns: Vec::new(),
        select: Vec::new(),
        guards: HashMap::default(),
        sites: HashMap::default(),
        by_args: HashMap::default(),
        instances: Vec::new(),
        set,
    };
    {
        let mut lo = Lowerer::new(set, &mut layout);
        let sel = Scope {
            prio: PrioFrom::Var,
            endpoint: false,
            strategy: None,
        };
        let guard = Scope {
            prio: PrioFrom::Aux,
            endpoint: true,
            strategy: None,
        };
        lo.start_function();
        for (ri, route) in set.routes.iter().enumerate() {
            let ri = ri as u32;
            let when = match &route.when {
                Some(w) => Some(lo.cond(w, &sel).map_err(|e| e.0)?),
                None => None,
            };
            let set_prio = sel_prio(&mut lo, &route.set_priority, &sel)?;
            let mut rules = Vec::new();
            for (ki, rule) in route
                .rules
                .iter()
                .chain(std::iter::once(&route.default))
                .enumerate()
            {
                let ki = ki as u32;
                rules.push(SelRule {
                    when: match &rule.when {
                        Some(w) => Some(lo.cond(w, &sel).map_err(|e| e.0)?),
                        None => None,
                    },
                    set_prio: sel_prio(&mut lo, &rule.body.set_priority, &sel)?,
                    cache: rule.body.cache.is_some(),
                    hold: rule.body.hold_off_peak,
                    fallback: rule.body.fallback.is_some(),
                    terminal: rule.body.terminal.is_some(),
                });
                let resume = lo.used();
                match &rule.body.terminal {
                    Some(CTerminal::Use(u)) => {
                        if let Some(i) = p.instance(&mut lo, u)? {
                            p.sites.insert((ri, ki, NO_ARM), i);
                        }
                    }
                    Some(CTerminal::Split(s)) => {
                        for (ai, arm) in s.arms.iter().enumerate() {
                            let ai = ai as u32;
                            if let Some(i) = p.instance(&mut lo, &arm.action)? {
                                p.sites.insert((ri, ki, ai), i);
                            }
                            if let Some(g) = &arm.rollback {
                                lo.start_function();
                                let n = lo.cond(g, &guard).map_err(|e| e.0)?;
                                let f = p.push(n);
                                p.guards.insert((ri, ki, ai), f);
                            }
                        }
                    }
                    _ => {}
                }
                lo.resume(resume);
            }
            p.select.push(SelRoute {
                when,
                set_prio,
                hold: route.hold_off_peak,
                rules,
                index: None,
            });
        }
    }
    // The selection function starts from the request's priority.
    let prio_cell = Some(layout.req(ReqSlot::Field(ReqField::Priority)));
    let dyn_prio = p
        .select
        .iter()
        .any(|r| !r.set_prio.is_empty() || r.rules.iter().any(|k| !k.set_prio.is_empty()));
    let ks = KeyScope {
        static_priority: if dyn_prio { None } else { prio_cell },
    };
    let mut indexes = Vec::new();
    for (ri, route) in p.select.iter_mut().enumerate() {
        if route.rules.len() < opts.index_min_rules.max(1) {
            continue;
        }
        let keysets: Vec<_> = route
            .rules
            .iter()
            .map(|k| k.when.as_ref().and_then(|w| index::keys(w, ks)))
            .collect();
        if keysets.iter().all(Option::is_none) {
            continue;
        }
        let mut mask_cell = None;
        for w in 0..index::words(keysets.len()) {
            let c = layout.req(ReqSlot::Mask(ri as u32, w as u32));
            if c != *mask_cell.get_or_insert(c) + w as u32 {
                return Err("rule index mask cells are not consecutive".into());
            }
        }
        let Some(mask_cell) = mask_cell else {
            continue;
        };
        route.index = Some(SelIndex {
            mask_cell,
            keyed: keysets.iter().map(Option::is_some).collect(),
        });
        indexes.push(RouteIndex::new(&keysets, mask_cell));
    }
    let lens = layout.lens();
    let rules: usize = set.routes.iter().map(|r| r.rules.len() + 1).sum();
    let mut module = new_module(rules <= OPTIMIZE_UP_TO_RULES)?;
    let built = (|| {
        let mut b = Builder::new(&mut module, lens).map_err(|e| e.0)?;
        let select = b.select_fn(&p.select, prio_cell).map_err(|e| e.0)?;
        let mut ids = Vec::with_capacity(p.fns.len() + 1);
        for (shape, n) in &p.fns {
            ids.push((*shape, b.expr_fn(n).map_err(|e| e.0)?));
        }
        ids.push((Shape::Select, select));
        Ok::<_, String>((ids, b.code_bytes))
    })();
    let (ids, code_bytes) = match built {
        Ok(ids) => ids,
        Err(e) => {
            discard(module);
            return Err(e);
        }
    };
    let select = ids.len() - 1;
    let native = Native::finalize(module, &ids, lens)?;
    Ok(JitCode {
        native,
        req_fill: ReqFill::new(&layout),
        layout,
        strings,
        select,
        guards: p.guards,
        sites: p.sites,
        by_args: p.by_args,
        instances: p.instances,
        index: indexes,
        code_bytes,
    })
}
