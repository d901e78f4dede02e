//! pest pairs → strategy and test definitions.

use pest::iterators::Pair;

use crate::policy::ast::*;
use crate::policy::grammar::Rule;

use super::super::{literal, Conv, Res};

impl Conv {
    pub(in crate::policy::parser) fn strategy(&self, p: Pair<'_, Rule>) -> Res<StrategyDef> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let name = self.ident(self.next(&mut it, &p)?);
        let mut s = StrategyDef {
            name,
            params: Vec::new(),
            items: Vec::new(),
            span,
        };
        for q in it {
            let qspan = self.sp(&q);
            let item = match q.as_rule() {
                Rule::params => {
                    for param in q.into_inner() {
                        s.params.push(self.param(param)?);
                    }
                    continue;
                }
                Rule::state_def => {
                    let mut si = q.clone().into_inner();
                    let name = self.ident(self.next(&mut si, &q)?);
                    let init = self.expr(self.next(&mut si, &q)?)?;
                    let join = match si.next().and_then(|j| j.into_inner().next()) {
                        Some(m) if m.as_str() == "mean" => JoinMode::Mean,
                        _ => JoinMode::Initial,
                    };
                    StrategyItem::State(StateDef {
                        name,
                        init,
                        join,
                        span: qspan,
                    })
                }
                Rule::let_def => {
                    let mut li = q.clone().into_inner();
                    let name = self.ident(self.next(&mut li, &q)?);
                    let value = self.expr(self.next(&mut li, &q)?)?;
                    StrategyItem::Let(LetDef {
                        name,
                        value,
                        span: qspan,
                    })
                }
                Rule::require_def | Rule::prefer_def | Rule::score_def => {
                    let rule = q.as_rule();
                    let e =
                        self.expr(q.clone().into_inner().next().ok_or_else(|| self.bug(&q))?)?;
                    match rule {
                        Rule::require_def => StrategyItem::Require(e),
                        Rule::prefer_def => StrategyItem::Prefer(e),
                        _ => StrategyItem::Score(e),
                    }
                }
                Rule::pick_def => {
                    let m = q.clone().into_inner().next().ok_or_else(|| self.bug(&q))?;
                    let mode = match m.as_str() {
                        "min" => PickMode::Min,
                        "max" => PickMode::Max,
                        "weighted" => PickMode::Weighted,
                        _ => PickMode::Sample,
                    };
                    StrategyItem::Pick(Spanned {
                        node: mode,
                        span: self.sp(&m),
                    })
                }
                Rule::on_def => {
                    let mut oi = q.clone().into_inner();
                    let ev = self.next(&mut oi, &q)?;
                    let event = Spanned {
                        node: match ev.as_str() {
                            "pick" => Event::Pick,
                            "success" => Event::Success,
                            _ => Event::Failure,
                        },
                        span: self.sp(&ev),
                    };
                    let mut assigns = Vec::new();
                    for a in oi {
                        let aspan = self.sp(&a);
                        let mut ai = a.clone().into_inner();
                        let name = self.ident(self.next(&mut ai, &a)?);
                        let value = self.expr(self.next(&mut ai, &a)?)?;
                        assigns.push(Assign {
                            name,
                            value,
                            span: aspan,
                        });
                    }
                    StrategyItem::On(OnBlock {
                        event,
                        assigns,
                        span: qspan,
                    })
                }
                _ => return Err(self.bug(&q)),
            };
            s.items.push(item);
        }
        Ok(s)
    }

    fn param(&self, p: Pair<'_, Rule>) -> Res<ParamDef> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let name = self.ident(self.next(&mut it, &p)?);
        let default = self.literal(self.next(&mut it, &p)?)?;
        let range = match it.next() {
            Some(r) => {
                let rspan = self.sp(&r);
                let mut ri = r.clone().into_inner();
                let open = self.next(&mut ri, &r)?;
                let lo = self.literal(self.next(&mut ri, &r)?)?;
                let hi = self.literal(self.next(&mut ri, &r)?)?;
                let close = self.next(&mut ri, &r)?;
                Some(RangeSpec {
                    lo,
                    lo_inclusive: open.as_str() == "[",
                    hi,
                    hi_inclusive: close.as_str() == "]",
                    span: rspan,
                })
            }
            None => None,
        };
        Ok(ParamDef {
            name,
            default,
            range,
            span,
        })
    }

    pub(in crate::policy::parser) fn test(&self, p: Pair<'_, Rule>) -> Res<TestDef> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let name = self.string(self.next(&mut it, &p)?)?;
        let mut items = Vec::new();
        for q in it {
            let qspan = self.sp(&q);
            let item = match q.as_rule() {
                Rule::request_block => {
                    let mut fields = Vec::new();
                    for a in q.into_inner() {
                        let aspan = self.sp(&a);
                        let mut ai = a.clone().into_inner();
                        let key_pair = self.next(&mut ai, &a)?;
                        let k = key_pair
                            .clone()
                            .into_inner()
                            .next()
                            .ok_or_else(|| self.bug(&key_pair))?;
                        let key = match k.as_rule() {
                            Rule::header_key | Rule::metadata_key => {
                                let is_header = k.as_rule() == Rule::header_key;
                                let s =
                                    k.clone().into_inner().next().ok_or_else(|| self.bug(&k))?;
                                let v = self.string(s)?.node;
                                if is_header {
                                    ReqKey::Header(v)
                                } else {
                                    ReqKey::Metadata(v)
                                }
                            }
                            _ => ReqKey::Field(self.ident(k)),
                        };
                        let value = self.literal(self.next(&mut ai, &a)?)?;
                        fields.push(ReqAssign {
                            key,
                            value,
                            span: aspan,
                        });
                    }
                    TestItem::Request(fields, qspan)
                }
                Rule::stats_block => {
                    let mut entries = Vec::new();
                    for e in q.into_inner() {
                        let espan = self.sp(&e);
                        let mut ei = e.clone().into_inner();
                        let endpoint = self.string(self.next(&mut ei, &e)?)?;
                        let mut fields = Vec::new();
                        for a in ei {
                            let mut ai = a.clone().into_inner();
                            let key = self.next(&mut ai, &a)?;
                            let key: Vec<Ident> = key.into_inner().map(|i| self.ident(i)).collect();
                            let value = self.literal(self.next(&mut ai, &a)?)?;
                            fields.push((key, value));
                        }
                        entries.push(StatsEntry {
                            endpoint,
                            fields,
                            span: espan,
                        });
                    }
                    TestItem::Stats(entries, qspan)
                }
                Rule::seed_stmt => {
                    let n = self.int(q.clone().into_inner().next().ok_or_else(|| self.bug(&q))?)?;
                    TestItem::Seed(Spanned {
                        node: n.node.unsigned_abs(),
                        span: n.span,
                    })
                }
                Rule::sample_stmt => {
                    let mut si = q.clone().into_inner();
                    let n = self.int(self.next(&mut si, &q)?)?;
                    let key = self.split_key(self.next(&mut si, &q)?)?;
                    TestItem::Sample {
                        count: Spanned {
                            node: n.node.unsigned_abs(),
                            span: n.span,
                        },
                        key,
                        span: qspan,
                    }
                }
                Rule::expect_stmt => {
                    let e = q.clone().into_inner().next().ok_or_else(|| self.bug(&q))?;
                    TestItem::Expect(Expectation {
                        kind: self.expectation(e)?,
                        span: qspan,
                    })
                }
                _ => return Err(self.bug(&q)),
            };
            items.push(item);
        }
        Ok(TestDef { name, items, span })
    }

    fn expectation(&self, e: Pair<'_, Rule>) -> Res<ExpectKind> {
        let mut it = e.clone().into_inner();
        if e.as_rule() == Rule::expect_reject {
            return Ok(ExpectKind::Reject(self.int(self.next(&mut it, &e)?)?));
        }
        let w = self.next(&mut it, &e)?;
        let what = ExpectField::parse(w.as_str()).ok_or_else(|| self.bug(&w))?;
        let v = self.next(&mut it, &e)?;
        let vspan = self.sp(&v);
        let vi = v.clone().into_inner().next().ok_or_else(|| self.bug(&v))?;
        let text = if vi.as_rule() == Rule::string {
            self.string(vi)?.node
        } else {
            vi.as_str().to_string()
        };
        let value = Spanned {
            node: text,
            span: vspan,
        };
        if e.as_rule() == Rule::expect_is {
            return Ok(ExpectKind::Is { what, value });
        }
        let pct = |q: Pair<'_, Rule>| -> Res<Spanned<i64>> {
            let s = self.sp(&q);
            Ok(Spanned {
                node: literal::percent(q.as_str(), s)?,
                span: s,
            })
        };
        let share = pct(self.next(&mut it, &e)?)?;
        let tolerance = pct(self.next(&mut it, &e)?)?;
        Ok(ExpectKind::Share {
            what,
            value,
            share,
            tolerance,
        })
    }
}
