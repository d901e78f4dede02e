//! Expressions: precedence-aware printing with the fewest parentheses.

use super::Printer;
use crate::policy::ast::*;

/// Binding strength, loosest first (matches the parser's Pratt table).
fn prec(e: &Expr) -> u8 {
    match &e.kind {
        ExprKind::Binary(op, ..) => match op {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Add | BinaryOp::Sub => 5,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 6,
            _ => 4,
        },
        ExprKind::Unary(UnaryOp::Not, _) => 3,
        ExprKind::Unary(UnaryOp::Neg, _) => 7,
        _ => 8,
    }
}

impl Printer<'_> {
    /// `e` on one line.
    pub(super) fn expr(&self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::Lit(_) => self.tok(e.span),
            ExprKind::List(xs) => format!(
                "[{}]",
                xs.iter()
                    .map(|x| self.expr(x))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ExprKind::Path(p) => p
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join("."),
            ExprKind::Var(v) => v.name.clone(),
            ExprKind::Call(f, args) => {
                format!(
                    "{}({})",
                    f.name,
                    args.iter()
                        .map(|x| self.expr(x))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            ExprKind::Unary(UnaryOp::Not, x) => {
                let inner = self.expr(x);
                // `not` binds looser than comparisons: only `and`/`or` need the
                // parentheses; around others they are clarifying.
                if prec(x) >= 8 || (!self.clarify && prec(x) >= 3) {
                    format!("not {inner}")
                } else {
                    format!("not ({inner})")
                }
            }
            ExprKind::Unary(UnaryOp::Neg, x) => {
                let inner = self.expr(x);
                if prec(x) >= 7 {
                    format!("-{inner}")
                } else {
                    format!("-({inner})")
                }
            }
            ExprKind::Binary(op, a, b) => {
                let p = prec(e);
                format!(
                    "{} {} {}",
                    self.operand(e, a, p, false),
                    op.as_str(),
                    self.operand(e, b, p, true)
                )
            }
        }
    }

    fn operand(&self, parent: &Expr, child: &Expr, p: u8, right: bool) -> String {
        let c = prec(child);
        let and_in_or = self.clarify
            && matches!(parent.kind, ExprKind::Binary(BinaryOp::Or, ..))
            && matches!(child.kind, ExprKind::Binary(BinaryOp::And, ..));
        // `not` binds looser than comparisons: as an operand of anything tighter
        // than `and` it needs parentheses.
        if c < p || (right && c == p) || and_in_or || (c == 3 && p > 3) {
            format!("({})", self.expr(child))
        } else {
            self.expr(child)
        }
    }

    /// A `when` condition, keeping the author's line breaks before the top-level
    /// `and`/`or` operands; continuation lines are indented to `indent + 4`.
    pub(super) fn cond(&self, e: &Expr, indent: usize) -> String {
        let ExprKind::Binary(op @ (BinaryOp::Or | BinaryOp::And), ..) = &e.kind else {
            return self.expr(e);
        };
        let mut parts = Vec::new();
        chain(e, *op, &mut parts);
        let mut s = String::new();
        for (i, part) in parts.iter().enumerate() {
            let text = if prec(part) < prec(e)
                || (self.clarify && *op == BinaryOp::Or && prec(part) == 2)
                || (i > 0 && prec(part) == prec(e))
            {
                format!("({})", self.expr(part))
            } else {
                self.expr(part)
            };
            if i == 0 {
                s.push_str(&text);
            } else if self.broken(parts[i - 1].span.end as usize, part.span.start as usize) {
                s.push_str(self.line_break(part.span.start as usize));
                s.push_str(&format!("{}{} {text}", " ".repeat(indent + 4), op.as_str()));
            } else {
                s.push_str(&format!(" {} {text}", op.as_str()));
            }
        }
        s
    }
}

/// The operands of a left-leaning chain of `op`.
fn chain<'e>(e: &'e Expr, op: BinaryOp, out: &mut Vec<&'e Expr>) {
    match &e.kind {
        ExprKind::Binary(o, a, b) if *o == op => {
            chain(a, op, out);
            out.push(b);
        }
        _ => out.push(e),
    }
}
