//! Cranelift code generation from [`Node`] trees: safe builder calls only (the one
//! `unsafe` file is [`super::native`]).
//!
//! Two function shapes:
//! - expression functions `extern "C" fn(req: *const u64, ep: *const u64, aux:
//!   *const u64) -> u64` returning the value's bits (bool 0/1, i64, f64 bits);
//! - the selection function `extern "C" fn(req: *const u64, out: *mut u64)` walking
//!   routes, `set priority` statements and rules ([`SelRoute`]) and storing six
//!   cells ([`OUT_CELLS`]).
//!
//! Guards, so nothing traps: every load's cell index is checked against the vector's
//! length here, at compile time (the host passes vectors of exactly that length);
//! integer `/` and `%` divide by a substituted 1 when the divisor is 0 or −1 and
//! select the defined result; `+ - * neg abs` detect overflow and saturate. Floats
//! never trap. The only calls are to the C math library ([`Libm`]).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, FuncRef, InstBuilder, MemFlagsData, Signature, UserFuncName, Value,
};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};

use crate::policy::checked::{ArithOp, CmpOp};

use super::ir::{LTy, Libm, Node, Vector};

mod select;

/// Cells of the selection function's output: route index, rule index (the route's
/// rule count means `default`), final priority code, index of the rule whose `cache`
/// applies, index of the rule whose `fallback` applies ([`NONE`]: the route's own, or
/// no route at all for the first cell), and 1 when the route or a rule applied on the
/// way says `hold off_peak` (else 0).
pub const OUT_CELLS: usize = 6;

/// "None" in an output cell.
pub const NONE: u64 = u64::MAX;

/// A code generation failure (the set then runs on the interpreter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodegenError(pub String);

fn cg<E: std::fmt::Display>(e: E) -> CodegenError {
    CodegenError(e.to_string())
}

/// `set priority LEVEL [when C]`, lowered.
#[derive(Debug)]
pub struct SelSetPrio {
    /// The condition (`None`: always).
    pub when: Option<Node>,
    /// The level's code.
    pub level: i64,
}

/// A rule, lowered for selection.
#[derive(Debug)]
pub struct SelRule {
    /// The condition (`None`: always).
    pub when: Option<Node>,
    /// Its `set priority` statements.
    pub set_prio: Vec<SelSetPrio>,
    /// Whether it overrides the cache setting.
    pub cache: bool,
    /// Whether it says `hold off_peak`.
    pub hold: bool,
    /// Whether it overrides the fallback chain.
    pub fallback: bool,
    /// Whether it ends evaluation (`false`: `continue`).
    pub terminal: bool,
}

/// A route, lowered for selection; `rules` ends with the default.
#[derive(Debug)]
pub struct SelRoute {
    /// The condition (`None`: always).
    pub when: Option<Node>,
    /// Route-level `set priority` statements.
    pub set_prio: Vec<SelSetPrio>,
    /// Whether the route says `hold off_peak`.
    pub hold: bool,
    /// Rules in evaluation order, then the default.
    pub rules: Vec<SelRule>,
    /// The route's candidate mask, when it is indexed ([`super::index`]).
    pub index: Option<SelIndex>,
}

/// Where an indexed route's candidate mask is and which rules it can rule out.
#[derive(Debug)]
pub struct SelIndex {
    /// First mask cell in the request vector (one word per 64 rules).
    pub mask_cell: u32,
    /// Per rule (default included): whether its mask bit can be 0 (keyed rules); the
    /// others are always candidates and are not tested.
    pub keyed: Vec<bool>,
}

/// Builds functions into one module.
pub struct Builder<'m> {
    module: &'m mut JITModule,
    ctx: Context,
    fctx: FunctionBuilderContext,
    libm: [Option<FuncId>; 4],
    lens: [u32; 3],
    next: u32,
    /// Machine code bytes emitted so far.
    pub code_bytes: usize,
}

struct Fx<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    base: [Value; 3],
    prio: Option<Variable>,
    prio_static: Option<Value>,
    lens: [u32; 3],
    load_flags: MemFlagsData,
    plain_flags: MemFlagsData,
    libm: [Option<FuncRef>; 4],
}

impl<'m> Builder<'m> {
    /// A builder for `module`; `lens` are the vector lengths every load is checked
    /// against.
    pub fn new(module: &'m mut JITModule, lens: [u32; 3]) -> Result<Builder<'m>, CodegenError> {
        let mut libm = [None; 4];
        for (slot, f) in libm.iter_mut().zip(Libm::ALL) {
            let mut sig = module.make_signature();
            for _ in 0..f.arity() {
                sig.params.push(AbiParam::new(types::F64));
            }
            sig.returns.push(AbiParam::new(types::F64));
            *slot = Some(
                module
                    .declare_function(f.symbol(), Linkage::Import, &sig)
                    .map_err(cg)?,
            );
        }
        let ctx = module.make_context();
        Ok(Builder {
            module,
            ctx,
            fctx: FunctionBuilderContext::new(),
            libm,
            lens,
            next: 0,
            code_bytes: 0,
        })
    }

    fn sig(&self, params: usize, ret: bool) -> Signature {
        let mut sig = self.module.make_signature();
        for _ in 0..params {
            sig.params.push(AbiParam::new(types::I64));
        }
        if ret {
            sig.returns.push(AbiParam::new(types::I64));
        }
        sig
    }

    fn define(
        &mut self,
        params: usize,
        ret: bool,
        body: impl FnOnce(&mut Fx<'_, '_>, &[Value]) -> Result<(), CodegenError>,
    ) -> Result<FuncId, CodegenError> {
        let sig = self.sig(params, ret);
        let name = format!("f{}", self.next);
        self.next += 1;
        let id = self
            .module
            .declare_function(&name, Linkage::Local, &sig)
            .map_err(cg)?;
        self.ctx.func.signature = sig;
        self.ctx.func.name = UserFuncName::user(0, id.as_u32());
        let mut refs = [None; 4];
        {
            let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
            for (r, f) in refs.iter_mut().zip(self.libm) {
                if let Some(f) = f {
                    *r = Some(self.module.declare_func_in_func(f, b.func));
                }
            }
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let args: Vec<Value> = b.block_params(entry).to_vec();
            let load_flags = MemFlagsData::trusted();
            let plain_flags = MemFlagsData::new();
            let zero = b.ins().iconst(types::I64, 0);
            let base = [
                args.first().copied().unwrap_or(zero),
                args.get(1).copied().unwrap_or(zero),
                args.get(2).copied().unwrap_or(zero),
            ];
            let mut fx = Fx {
                b: &mut b,
                base,
                prio: None,
                prio_static: None,
                lens: self.lens,
                load_flags,
                plain_flags,
                libm: refs,
            };
            let r = body(&mut fx, &args);
            b.seal_all_blocks();
            r?;
            b.finalize(self.module.target_config());
        }
        let r = self.module.define_function(id, &mut self.ctx).map_err(cg);
        if let Some(c) = self.ctx.compiled_code() {
            self.code_bytes += c.code_info().total_size as usize;
        }
        self.module.clear_context(&mut self.ctx);
        r?;
        Ok(id)
    }

    /// Compiles an expression function returning the value's bits.
    pub fn expr_fn(&mut self, n: &Node) -> Result<FuncId, CodegenError> {
        self.define(3, true, |fx, _| {
            let v = fx.emit(n)?;
            let bits = match n.ty() {
                LTy::B => fx.b.ins().uextend(types::I64, v),
                LTy::I => v,
                LTy::F => fx.b.ins().bitcast(types::I64, fx.plain_flags, v),
            };
            fx.b.ins().return_(&[bits]);
            Ok(())
        })
    }

    /// Compiles the selection function over `routes`.
    pub fn select_fn(
        &mut self,
        routes: &[SelRoute],
        prio_cell: Option<u32>,
    ) -> Result<FuncId, CodegenError> {
        self.define(2, false, |fx, args| {
            fx.select(routes, prio_cell, args.get(1).copied())
        })
    }
}

impl Fx<'_, '_> {
    fn emit(&mut self, n: &Node) -> Result<Value, CodegenError> {
        Ok(match n {
            Node::Bool(v) => self.b.ins().iconst(types::I8, i64::from(*v)),
            Node::Int(i) => self.b.ins().iconst(types::I64, *i),
            Node::Float(f) => self.b.ins().f64const(*f),
            Node::Load(slot, t) => {
                let (vi, len) = match slot.vector {
                    Vector::Req => (0, self.lens[0]),
                    Vector::Ep => (1, self.lens[1]),
                    Vector::Aux => (2, self.lens[2]),
                };
                if slot.index >= len {
                    return Err(CodegenError(format!(
                        "cell {} outside a vector of {len}",
                        slot.index
                    )));
                }
                let off = i32::try_from(slot.index as u64 * 8).map_err(cg)?;
                let (base, flags) = (self.base[vi], self.load_flags);
                match t {
                    LTy::F => self.b.ins().load(types::F64, flags, base, off),
                    LTy::I => self.b.ins().load(types::I64, flags, base, off),
                    LTy::B => {
                        let raw = self.b.ins().load(types::I64, flags, base, off);
                        self.b.ins().icmp_imm_s(IntCC::NotEqual, raw, 0)
                    }
                }
            }
            Node::Priority => match (self.prio_static, self.prio) {
                (Some(v), _) => v,
                (None, Some(v)) => self.b.use_var(v),
                _ => return Err(CodegenError("priority variable outside selection".into())),
            },
            Node::ToFloat(x) => {
                let v = self.emit(x)?;
                self.b.ins().fcvt_from_sint(types::F64, v)
            }
            Node::Not(x) => {
                let v = self.emit(x)?;
                self.b.ins().bxor_imm_s(v, 1)
            }
            Node::NegI(x) => {
                let v = self.emit(x)?;
                let neg = self.b.ins().ineg(v);
                let is_min = self.b.ins().icmp_imm_s(IntCC::Equal, v, i64::MIN);
                let max = self.b.ins().iconst(types::I64, i64::MAX);
                self.b.ins().select(is_min, max, neg)
            }
            Node::NegF(x) => {
                let v = self.emit(x)?;
                self.b.ins().fneg(v)
            }
            Node::AbsI(x) => {
                let v = self.emit(x)?;
                let a = self.b.ins().iabs(v);
                let is_min = self.b.ins().icmp_imm_s(IntCC::Equal, v, i64::MIN);
                let max = self.b.ins().iconst(types::I64, i64::MAX);
                self.b.ins().select(is_min, max, a)
            }
            Node::AbsF(x) => {
                let v = self.emit(x)?;
                self.b.ins().fabs(v)
            }
            Node::Sqrt(x) => {
                let v = self.emit(x)?;
                self.b.ins().sqrt(v)
            }
            Node::And(x, y) => self.short(x, y, true)?,
            Node::Or(x, y) => self.short(x, y, false)?,
            Node::If(t, c, x, y) => {
                let c = self.emit(c)?;
                let ty = match t {
                    LTy::B => types::I8,
                    LTy::I => types::I64,
                    LTy::F => types::F64,
                };
                let (then_b, else_b, merge) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                self.b.append_block_param(merge, ty);
                self.b.ins().brif(c, then_b, &[], else_b, &[]);
                self.b.switch_to_block(then_b);
                let v = self.emit(x)?;
                self.b.ins().jump(merge, &[v.into()]);
                self.b.switch_to_block(else_b);
                let w = self.emit(y)?;
                self.b.ins().jump(merge, &[w.into()]);
                self.b.switch_to_block(merge);
                self.b.block_params(merge)[0]
            }
            Node::ArithI(op, x, y) => {
                let (a, c) = (self.emit(x)?, self.emit(y)?);
                self.arith_i(*op, a, c)
            }
            Node::ArithF(op, x, y) => {
                let (a, c) = (self.emit(x)?, self.emit(y)?);
                match op {
                    ArithOp::Add => self.b.ins().fadd(a, c),
                    ArithOp::Sub => self.b.ins().fsub(a, c),
                    ArithOp::Mul => self.b.ins().fmul(a, c),
                    ArithOp::Div => self.b.ins().fdiv(a, c),
                    ArithOp::Rem => self.call(Libm::Fmod, &[a, c])?,
                }
            }
            Node::CmpI(op, x, y) => {
                let (a, c) = (self.emit(x)?, self.emit(y)?);
                let cc = match op {
                    CmpOp::Eq => IntCC::Equal,
                    CmpOp::Ne => IntCC::NotEqual,
                    CmpOp::Lt => IntCC::SignedLessThan,
                    CmpOp::Le => IntCC::SignedLessThanOrEqual,
                    CmpOp::Gt => IntCC::SignedGreaterThan,
                    CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
                };
                self.b.ins().icmp(cc, a, c)
            }
            Node::CmpF(op, x, y) => {
                let (a, c) = (self.emit(x)?, self.emit(y)?);
                self.b.ins().fcmp(fcc(*op), a, c)
            }
            Node::MinI(is_min, x, y) => {
                let (a, c) = (self.emit(x)?, self.emit(y)?);
                let cc = if *is_min {
                    IntCC::SignedLessThanOrEqual
                } else {
                    IntCC::SignedGreaterThanOrEqual
                };
                let k = self.b.ins().icmp(cc, a, c);
                self.b.ins().select(k, a, c)
            }
            Node::MinF(is_min, x, y) => {
                let (a, c) = (self.emit(x)?, self.emit(y)?);
                let cc = if *is_min {
                    FloatCC::LessThanOrEqual
                } else {
                    FloatCC::GreaterThanOrEqual
                };
                let k = self.b.ins().fcmp(cc, a, c);
                self.b.ins().select(k, a, c)
            }
            Node::Call(f, args) => {
                let mut vs = Vec::with_capacity(args.len());
                for a in args {
                    vs.push(self.emit(a)?);
                }
                self.call(*f, &vs)?
            }
            Node::InI(x, list) => {
                let mut v = self.emit(x)?;
                if x.ty() == LTy::B {
                    v = self.b.ins().uextend(types::I64, v);
                }
                let mut acc = self.b.ins().iconst(types::I8, 0);
                for c in list {
                    let e = self.b.ins().icmp_imm_s(IntCC::Equal, v, *c);
                    acc = self.b.ins().bor(acc, e);
                }
                acc
            }
            Node::InF(x, list) => {
                let v = self.emit(x)?;
                let mut acc = self.b.ins().iconst(types::I8, 0);
                for c in list {
                    let k = self.b.ins().f64const(*c);
                    let e = self.b.ins().fcmp(FloatCC::Equal, v, k);
                    acc = self.b.ins().bor(acc, e);
                }
                acc
            }
        })
    }

    fn call(&mut self, f: Libm, args: &[Value]) -> Result<Value, CodegenError> {
        let Some(r) = self.libm[f as usize] else {
            return Err(CodegenError(format!("{} not declared", f.symbol())));
        };
        if args.len() != f.arity() {
            return Err(CodegenError(format!(
                "{} takes {} arguments",
                f.symbol(),
                f.arity()
            )));
        }
        let call = self.b.ins().call(r, args);
        self.b
            .inst_results(call)
            .first()
            .copied()
            .ok_or_else(|| CodegenError("a call without a result".into()))
    }

    /// `and` (is_and) / `or` with short-circuit.
    fn short(&mut self, x: &Node, y: &Node, is_and: bool) -> Result<Value, CodegenError> {
        let a = self.emit(x)?;
        let (rhs, merge) = (self.b.create_block(), self.b.create_block());
        self.b.append_block_param(merge, types::I8);
        if is_and {
            self.b.ins().brif(a, rhs, &[], merge, &[a.into()]);
        } else {
            self.b.ins().brif(a, merge, &[a.into()], rhs, &[]);
        }
        self.b.switch_to_block(rhs);
        let c = self.emit(y)?;
        self.b.ins().jump(merge, &[c.into()]);
        self.b.switch_to_block(merge);
        Ok(self.b.block_params(merge)[0])
    }

    /// Saturating add/sub/mul; total div/rem (see module docs).
    fn arith_i(&mut self, op: ArithOp, a: Value, c: Value) -> Value {
        let max = self.b.ins().iconst(types::I64, i64::MAX);
        match op {
            ArithOp::Add | ArithOp::Sub | ArithOp::Mul => {
                let (r, of) = match op {
                    ArithOp::Add => self.b.ins().sadd_overflow(a, c),
                    ArithOp::Sub => self.b.ins().ssub_overflow(a, c),
                    _ => self.b.ins().smul_overflow(a, c),
                };
                // Overflow direction: add/sub follow a's sign; mul follows a^c's.
                let sign_src = if op == ArithOp::Mul {
                    self.b.ins().bxor(a, c)
                } else {
                    a
                };
                let sign = self.b.ins().sshr_imm_s(sign_src, 63);
                let sat = self.b.ins().bxor(sign, max);
                self.b.ins().select(of, sat, r)
            }
            ArithOp::Div | ArithOp::Rem => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, c, 0);
                let minus1 = self.b.ins().icmp_imm_s(IntCC::Equal, c, -1);
                let unsafe_div = self.b.ins().bor(zero, minus1);
                let one = self.b.ins().iconst(types::I64, 1);
                let d = self.b.ins().select(unsafe_div, one, c);
                if op == ArithOp::Rem {
                    // x % 1 = 0 = x % 0 = x % -1 (wrapping): no further select.
                    return self.b.ins().srem(a, d);
                }
                let q = self.b.ins().sdiv(a, d);
                let neg = self.b.ins().ineg(a);
                let is_min = self.b.ins().icmp_imm_s(IntCC::Equal, a, i64::MIN);
                let sat_neg = self.b.ins().select(is_min, max, neg);
                let q = self.b.ins().select(minus1, sat_neg, q);
                let z = self.b.ins().iconst(types::I64, 0);
                self.b.ins().select(zero, z, q)
            }
        }
    }
}

fn fcc(op: CmpOp) -> FloatCC {
    match op {
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
        CmpOp::Lt => FloatCC::LessThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
    }
}
