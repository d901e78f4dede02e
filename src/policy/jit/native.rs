//! The only `unsafe` of the policy JIT: owning a finalized [`JITModule`], calling its
//! functions, freeing its code.
//!
//! # Safety argument
//!
//! 1. **Pointers stay valid while callable.** A [`Native`] owns its module in a
//!    `Mutex<Option<JITModule>>` and the raw function pointers taken from it after
//!    `finalize_definitions`. The pointers never leave this struct: callers use
//!    [`Native::call_expr`] / [`Native::call_select`], which borrow `&self`. The code
//!    is freed (`free_memory`) only in `Drop`, which runs when no borrow of `self`
//!    exists, so no compiled function is running or callable then. A [`BoundExpr`]
//!    ([`Native::bind_expr`]) holds a pointer for the lifetime of a borrow of `self`
//!    and of the vectors it was bound to, so the same holds for it.
//! 2. **Every call matches the function's real signature.** Functions are declared by
//!    [`super::codegen::Builder`] with exactly two shapes (selection: two `i64`
//!    pointers, no result; expression: three `i64` pointers, one `i64` result) and the
//!    [`Native`] records each id's shape ([`Shape`]); a call through the wrong shape
//!    is refused, not attempted.
//! 3. **Every memory access is in bounds.** Compiled code loads only at constant cell
//!    offsets, each checked at code generation against the vector lengths recorded
//!    here (`lens`); the call wrappers refuse slices shorter than those lengths (a
//!    [`BoundExpr`] checked its request and aux vectors when bound, and checks each
//!    endpoint vector per call) and
//!    the output array has exactly [`OUT_CELLS`] cells, the only cells the selection
//!    function stores to. No pointer is retained by compiled code after it returns.
//! 4. **No traps, unwinding or panics cross the boundary.** Generated code contains no
//!    trapping instruction: integer division is guarded (codegen substitutes the
//!    divisor 1 for 0 and −1), loads are flagged `notrap` and in bounds, there are no
//!    float→int conversions. The only calls out are to the C library's `exp`, `log`,
//!    `pow` and `fmod`, registered explicitly (never looked up by name at run time):
//!    leaf C functions that cannot unwind; at worst they set `errno`.
//! 5. **Threads.** `JITModule` is `Send` but not `Sync`; it sits behind a `Mutex` and
//!    is touched only in `Drop`. The finalized code pages are immutable and the
//!    functions are pure (they read their arguments, write only `out`), so calling
//!    them from many threads at once through `&self` is sound; hence the manual
//!    `Sync`/`Send` for [`Native`] (raw pointers are neither by default).
#![allow(unsafe_code)] // The crate denies `unsafe`; this module is its one exception.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::FuncId;

use super::codegen::OUT_CELLS;
use super::ir::Libm;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Number of compiled policy modules whose code is currently mapped (the gateway's
/// `switchyard_policy_jit_live_modules` gauge). Rises when a set compiles, falls when
/// its last reference drops and the code is freed.
pub fn live_compiled_modules() -> usize {
    LIVE.load(Ordering::Relaxed)
}

// The C math library, the same symbols Rust's `f64::exp`, `ln`, `powf` and `%` call.
// Only their addresses are taken here; compiled code calls them (argument 4 above).
extern "C" {
    fn exp(x: f64) -> f64;
    fn log(x: f64) -> f64;
    fn pow(x: f64, y: f64) -> f64;
    fn fmod(x: f64, y: f64) -> f64;
}

/// A JIT module for the host ISA with the math symbols registered explicitly.
/// `optimize` selects cranelift's `speed` level (else `none`: about half the compile
/// time, a few percent slower code; chosen for large sets).
pub fn new_module(optimize: bool) -> Result<JITModule, String> {
    let mut flags = cranelift_codegen::settings::builder();
    use cranelift_codegen::settings::Configurable;
    flags
        .set("use_colocated_libcalls", "false")
        .map_err(|e| e.to_string())?;
    flags.set("is_pic", "false").map_err(|e| e.to_string())?;
    let opt = if optimize { "speed" } else { "none" };
    flags.set("opt_level", opt).map_err(|e| e.to_string())?;
    // Cranelift's IR verifier took about a fifth of the instructions of compiling a
    // 1,000-rule set (issue 17, `examples/decide_cost.rs compile1000` under
    // callgrind). It checks our code generator, not the policy: debug builds, which
    // run the test suite and the JIT-against-interpreter property tests, keep it on;
    // release builds leave it off, as wasmtime does by default. A release load still
    // runs the set's own tests on both engines before it serves.
    let verify = if cfg!(debug_assertions) {
        "true"
    } else {
        "false"
    };
    flags
        .set("enable_verifier", verify)
        .map_err(|e| e.to_string())?;
    let isa = cranelift_native::builder()
        .map_err(|e| format!("host machine is not supported: {e}"))?
        .finish(cranelift_codegen::settings::Flags::new(flags))
        .map_err(|e| e.to_string())?;
    let mut b = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
    let syms: [(Libm, *const u8); 4] = [
        (Libm::Exp, exp as *const u8),
        (Libm::Log, log as *const u8),
        (Libm::Pow, pow as *const u8),
        (Libm::Fmod, fmod as *const u8),
    ];
    for (f, p) in syms {
        b.symbol(f.symbol(), p);
    }
    Ok(JITModule::new(b))
}

/// The calling convention of a compiled function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `extern "C" fn(req, out)`.
    Select,
    /// `extern "C" fn(req, ep, aux) -> u64`.
    Expr,
}

type SelectFn = extern "C" fn(*const u64, *mut u64);
type ExprFn = extern "C" fn(*const u64, *const u64, *const u64) -> u64;

/// Finalized code of one compiled policy set.
pub struct Native {
    module: Mutex<Option<JITModule>>,
    fns: Vec<(Shape, *const u8)>,
    lens: [usize; 3],
}

// SAFETY: argument 5 of the module documentation.
unsafe impl Send for Native {}
// SAFETY: argument 5 of the module documentation.
unsafe impl Sync for Native {}

impl Native {
    /// Finalizes `module` and takes the addresses of `fns` (in the order given; the
    /// index in this list is the handle callers use). `lens` are the vector lengths
    /// code generation checked every load against.
    pub fn finalize(
        mut module: JITModule,
        fns: &[(Shape, FuncId)],
        lens: [u32; 3],
    ) -> Result<Native, String> {
        if let Err(e) = module.finalize_definitions() {
            // Not finalized: nothing is callable; free what was allocated.
            // SAFETY: no pointer was taken from this module (argument 1).
            unsafe { module.free_memory() };
            return Err(e.to_string());
        }
        let ptrs = fns
            .iter()
            .map(|(shape, id)| (*shape, module.get_finalized_function(*id)))
            .collect();
        LIVE.fetch_add(1, Ordering::Relaxed);
        Ok(Native {
            module: Mutex::new(Some(module)),
            fns: ptrs,
            lens: lens.map(|l| l as usize),
        })
    }

    /// Calls expression function `f`; `None` if `f` is not an expression function or
    /// a vector is shorter than the layout.
    pub fn call_expr(&self, f: usize, req: &[u64], ep: &[u64], aux: &[u64]) -> Option<u64> {
        let &(shape, ptr) = self.fns.get(f)?;
        if shape != Shape::Expr
            || req.len() < self.lens[0]
            || ep.len() < self.lens[1]
            || aux.len() < self.lens[2]
        {
            return None;
        }
        // SAFETY: `ptr` is a finalized function of `self.module` with this exact
        // signature (argument 2), alive while `self` is borrowed (argument 1); the
        // slices cover every cell it reads (argument 3).
        let func = unsafe { std::mem::transmute::<*const u8, ExprFn>(ptr) };
        Some(func(req.as_ptr(), ep.as_ptr(), aux.as_ptr()))
    }

    /// Expression function `f` bound to the request vector `req` and the aux vector
    /// `aux`, for calls over many endpoint vectors that check `f`, `req` and `aux`
    /// once; `None` where [`Native::call_expr`] would refuse the call.
    pub fn bind_expr<'n>(
        &'n self,
        f: usize,
        req: &'n [u64],
        aux: &'n [u64],
    ) -> Option<BoundExpr<'n>> {
        let &(shape, ptr) = self.fns.get(f)?;
        if shape != Shape::Expr || req.len() < self.lens[0] || aux.len() < self.lens[2] {
            return None;
        }
        // SAFETY: as in `call_expr`; the pointer lives in the returned value, which
        // borrows `self`, `req` and `aux` (argument 1), and is called only through
        // `BoundExpr::call`, which checks the endpoint vector (argument 3).
        let func = unsafe { std::mem::transmute::<*const u8, ExprFn>(ptr) };
        Some(BoundExpr {
            func,
            req: req.as_ptr(),
            aux: aux.as_ptr(),
            ep_len: self.lens[1],
            _borrows: PhantomData,
        })
    }

    /// Calls selection function `f`; `None` if `f` is not one or `req` is too short.
    pub fn call_select(&self, f: usize, req: &[u64]) -> Option<[u64; OUT_CELLS]> {
        let &(shape, ptr) = self.fns.get(f)?;
        if shape != Shape::Select || req.len() < self.lens[0] {
            return None;
        }
        let mut out = [0u64; OUT_CELLS];
        // SAFETY: arguments 1–3: live, correctly typed, `out` has every stored cell.
        let func = unsafe { std::mem::transmute::<*const u8, SelectFn>(ptr) };
        func(req.as_ptr(), out.as_mut_ptr());
        Some(out)
    }
}

/// An expression function with its request and aux vectors
/// ([`Native::bind_expr`]).
pub struct BoundExpr<'n> {
    func: ExprFn,
    req: *const u64,
    aux: *const u64,
    ep_len: usize,
    _borrows: PhantomData<(&'n Native, &'n [u64])>,
}

impl BoundExpr<'_> {
    /// Calls the function on endpoint vector `ep`; `None` if `ep` is too short.
    #[inline]
    pub fn call(&self, ep: &[u64]) -> Option<u64> {
        if ep.len() < self.ep_len {
            return None;
        }
        Some((self.func)(self.req, ep.as_ptr(), self.aux))
    }

    /// Calls the function on the first `count` rows of `eps` (row `r` is the
    /// vector starting at `eps[r * stride]`): on rows `rows` in order, or on every
    /// row when `rows` is `None`, writing the results to `out` in the same order.
    /// One call for a whole candidate list, so the checks are made once here
    /// rather than through an `Option` per call in every caller's loop (issue 17: a
    /// model's 128 endpoints). `None` (with `out` partly written) when `stride` is
    /// shorter than the vector the code reads, `eps` is shorter than `count` rows,
    /// a row is not below `count`, or `out` is shorter than the rows. Each result
    /// is written as `map` turns it (`f64::from_bits` for a float function), so a
    /// list of scores needs no second buffer.
    pub fn call_rows<T>(
        &self,
        eps: &[u64],
        stride: usize,
        count: usize,
        rows: Option<&[usize]>,
        out: &mut [T],
        map: impl Fn(u64) -> T,
    ) -> Option<()> {
        if stride < self.ep_len || eps.len() < count.checked_mul(stride)? {
            return None;
        }
        // Row r < count starts at r * stride and ends within `eps`; with a stride
        // of 0 the code reads no cell.
        let row = |r: usize| {
            map((self.func)(
                self.req,
                eps.as_ptr().wrapping_add(r * stride),
                self.aux,
            ))
        };
        match rows {
            Some(rows) => {
                if out.len() < rows.len() {
                    return None;
                }
                for (&r, o) in rows.iter().zip(out.iter_mut()) {
                    if r >= count {
                        return None;
                    }
                    *o = row(r);
                }
            }
            None => {
                for (r, o) in out.get_mut(..count)?.iter_mut().enumerate() {
                    *o = row(r);
                }
            }
        }
        Some(())
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        let module = match self.module.get_mut() {
            Ok(m) => m.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(m) = module {
            // SAFETY: `drop` has `&mut self`, so no call through `&self` is running and
            // the pointers in `self.fns` die with `self` (argument 1).
            unsafe { m.free_memory() };
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Frees a module that failed before [`Native::finalize`] took any pointer from it.
pub fn discard(module: JITModule) {
    // SAFETY: no function pointer was ever taken from `module` (argument 1).
    unsafe { module.free_memory() };
}
