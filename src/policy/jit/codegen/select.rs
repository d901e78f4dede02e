//! The selection function: routes, `set priority` statements and rules walked in
//! order, conditions compiled to jumps.

use cranelift_codegen::ir::{types, Block, InstBuilder, Value};
use cranelift_frontend::Variable;

use super::{CodegenError, Fx, SelRoute, SelSetPrio, NONE, OUT_CELLS};
use crate::policy::jit::ir::{LTy, Node, Slot, Vector};

impl Fx<'_, '_> {
    /// Emits `n` (a boolean) as jumps: to `t` when it holds, to `f` otherwise. Leaves
    /// the current block terminated. `and`/`or`/`not`/`if` become control flow with
    /// no block parameters, which keeps rule walks small to compile and fast to run.
    fn branch(&mut self, n: &Node, t: Block, f: Block) -> Result<(), CodegenError> {
        match n {
            Node::Bool(true) => {
                self.b.ins().jump(t, &[]);
            }
            Node::Bool(false) => {
                self.b.ins().jump(f, &[]);
            }
            Node::Not(x) => self.branch(x, f, t)?,
            Node::And(x, y) => {
                let mid = self.b.create_block();
                self.branch(x, mid, f)?;
                self.b.switch_to_block(mid);
                self.branch(y, t, f)?;
            }
            Node::Or(x, y) => {
                let mid = self.b.create_block();
                self.branch(x, t, mid)?;
                self.b.switch_to_block(mid);
                self.branch(y, t, f)?;
            }
            Node::If(LTy::B, c, x, y) => {
                let (bx, by) = (self.b.create_block(), self.b.create_block());
                self.branch(c, bx, by)?;
                self.b.switch_to_block(bx);
                self.branch(x, t, f)?;
                self.b.switch_to_block(by);
                self.branch(y, t, f)?;
            }
            _ => {
                let v = self.emit(n)?;
                self.b.ins().brif(v, t, &[], f, &[]);
            }
        }
        Ok(())
    }

    fn set_prio(&mut self, sps: &[SelSetPrio], prio: Variable) -> Result<(), CodegenError> {
        for sp in sps {
            let level = self.b.ins().iconst(types::I64, sp.level);
            match &sp.when {
                None => self.b.def_var(prio, level),
                Some(w) => {
                    let c = self.emit(w)?;
                    let old = self.b.use_var(prio);
                    let v = self.b.ins().select(c, level, old);
                    self.b.def_var(prio, v);
                }
            }
        }
        Ok(())
    }

    /// The selection walk. Priority, cache source, fallback source and the hold flag
    /// are SSA variables only where a `set priority` or a `continue` rule can change
    /// them at run time; otherwise they are the entry value or constants (no block
    /// parameters, which keeps large rule sets cheap to compile).
    pub(super) fn select(
        &mut self,
        routes: &[SelRoute],
        prio_cell: Option<u32>,
        out: Option<Value>,
    ) -> Result<(), CodegenError> {
        let out = out.ok_or_else(|| CodegenError("selection without an output".into()))?;
        let init = match prio_cell {
            Some(i) => self.emit(&Node::Load(
                Slot {
                    vector: Vector::Req,
                    index: i,
                },
                LTy::I,
            ))?,
            None => self.b.ins().iconst(types::I64, 1),
        };
        let dyn_prio = routes
            .iter()
            .any(|r| !r.set_prio.is_empty() || r.rules.iter().any(|k| !k.set_prio.is_empty()));
        let prio = self.b.declare_var(types::I64);
        if dyn_prio {
            self.b.def_var(prio, init);
            self.prio = Some(prio);
        } else {
            self.prio_static = Some(init);
        }
        let cache = self.b.declare_var(types::I64);
        let fallback = self.b.declare_var(types::I64);
        let hold = self.b.declare_var(types::I64);
        let store = |fx: &mut Self, vals: [Value; OUT_CELLS]| {
            for (k, v) in vals.into_iter().enumerate() {
                let flags = fx.load_flags;
                fx.b.ins().store(flags, v, out, (k * 8) as i32);
            }
            fx.b.ins().return_(&[]);
        };
        let cur_prio = |fx: &mut Self| match fx.prio_static {
            Some(v) => v,
            None => fx.b.use_var(prio),
        };
        for (ri, route) in routes.iter().enumerate() {
            let dyn_cache = route.rules.iter().any(|k| !k.terminal && k.cache);
            let dyn_fb = route.rules.iter().any(|k| !k.terminal && k.fallback);
            // A route that holds holds for every rule: nothing to track.
            let dyn_hold = !route.hold && route.rules.iter().any(|k| !k.terminal && k.hold);
            let next_route = self.b.create_block();
            if let Some(w) = &route.when {
                let body = self.b.create_block();
                self.branch(w, body, next_route)?;
                self.b.switch_to_block(body);
            }
            self.set_prio(&route.set_prio, prio)?;
            let none = self.b.ins().iconst(types::I64, NONE as i64);
            if dyn_cache {
                self.b.def_var(cache, none);
            }
            if dyn_fb {
                self.b.def_var(fallback, none);
            }
            if dyn_hold {
                let no = self.b.ins().iconst(types::I64, 0);
                self.b.def_var(hold, no);
            }
            // Indexed routes: per group of 64 rules, one mask word; a zero word skips
            // the group, a zero bit skips a keyed rule.
            let keyed = |ki: usize| {
                route
                    .index
                    .as_ref()
                    .is_some_and(|x| x.keyed.get(ki).copied().unwrap_or(false))
            };
            let mut word: Option<Value> = None;
            let mut group_end: Option<Block> = None;
            for (ki, rule) in route.rules.iter().enumerate() {
                if let (Some(ix), 0) = (&route.index, ki % 64) {
                    let group = ki..(ki + 64).min(route.rules.len());
                    if group.clone().any(keyed) {
                        let w = self.emit(&Node::Load(
                            Slot {
                                vector: Vector::Req,
                                index: ix.mask_cell + (ki / 64) as u32,
                            },
                            LTy::I,
                        ))?;
                        let (body, end) = (self.b.create_block(), self.b.create_block());
                        self.b.ins().brif(w, body, &[], end, &[]);
                        self.b.switch_to_block(body);
                        word = Some(w);
                        group_end = Some(end);
                    } else {
                        word = None;
                        group_end = None;
                    }
                }
                let last_of_group = ki % 64 == 63 || ki + 1 == route.rules.len();
                let next_rule = match group_end {
                    Some(end) if last_of_group => end,
                    _ => self.b.create_block(),
                };
                if let (Some(w), true) = (word, keyed(ki)) {
                    let bit = self.b.ins().band_imm_s(w, (1u64 << (ki % 64)) as i64);
                    let test = self.b.create_block();
                    self.b.ins().brif(bit, test, &[], next_rule, &[]);
                    self.b.switch_to_block(test);
                }
                if let Some(w) = &rule.when {
                    let body = self.b.create_block();
                    self.branch(w, body, next_rule)?;
                    self.b.switch_to_block(body);
                }
                self.set_prio(&rule.set_prio, prio)?;
                let me = self.b.ins().iconst(types::I64, ki as i64);
                if rule.terminal {
                    let r = self.b.ins().iconst(types::I64, ri as i64);
                    let none = self.b.ins().iconst(types::I64, NONE as i64);
                    let c = match (rule.cache, dyn_cache) {
                        (true, _) => me,
                        (false, true) => self.b.use_var(cache),
                        (false, false) => none,
                    };
                    let f = match (rule.fallback, dyn_fb) {
                        (true, _) => me,
                        (false, true) => self.b.use_var(fallback),
                        (false, false) => none,
                    };
                    let h = match (route.hold || rule.hold, dyn_hold) {
                        (true, _) => self.b.ins().iconst(types::I64, 1),
                        (false, true) => self.b.use_var(hold),
                        (false, false) => self.b.ins().iconst(types::I64, 0),
                    };
                    let p = cur_prio(self);
                    store(self, [r, me, p, c, f, h]);
                } else {
                    if rule.cache {
                        self.b.def_var(cache, me);
                    }
                    if rule.hold && dyn_hold {
                        let yes = self.b.ins().iconst(types::I64, 1);
                        self.b.def_var(hold, yes);
                    }
                    if rule.fallback {
                        self.b.def_var(fallback, me);
                    }
                    self.b.ins().jump(next_rule, &[]);
                }
                self.b.switch_to_block(next_rule);
            }
            self.b.ins().jump(next_route, &[]);
            self.b.switch_to_block(next_route);
        }
        let none = self.b.ins().iconst(types::I64, NONE as i64);
        let no = self.b.ins().iconst(types::I64, 0);
        let p = cur_prio(self);
        store(self, [none, none, p, none, none, no]);
        Ok(())
    }
}
