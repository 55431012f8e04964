//! The parsed form of a CCL contract: rules whose statements and expressions have every
//! variable already resolved to a slot.
//!
//! These types only hold data. They deliberately carry no source positions (the interpreter
//! rebuilds an error's path while unwinding, which costs nothing on the success path) and no
//! names for locals (a name lookup per read would make variable access cost more than the one
//! unit of fuel it is charged).

use super::value::{BinOp, Value};

/// One rule, ready to run.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    pub(super) name: String,
    /// Parameter names; parameter `i` lives in local slot `i`.
    pub(super) params: Vec<String>,
    pub(super) requires: Vec<Expr>,
    pub(super) body: Vec<Stmt>,
    /// Parameters plus one slot per `Let` statement of the body.
    pub(super) n_slots: usize,
}

/// A trigger: the event name `on` that should run `rule`. The interpreter does not act on
/// triggers; they are validated and kept for whoever schedules runs.
#[derive(Debug, Clone)]
pub(super) struct Trigger {
    pub(super) rule: String,
    pub(super) on: String,
}

/// A statement.
#[derive(Debug, Clone)]
pub(super) enum Stmt {
    /// `{"Let": [name, expr]}`: binds a new local in slot `slot`.
    Let { slot: usize, expr: Expr },
    /// `{"Set": [state_var, expr]}`: assigns state variable number `state`.
    Set { state: usize, expr: Expr },
    /// `{"If": [cond, then, else]}`.
    If { cond: Expr, then_branch: Vec<Stmt>, else_branch: Vec<Stmt> },
    /// `{"Return": expr}`.
    Return(Expr),
}

/// An expression.
#[derive(Debug, Clone)]
pub(super) enum Expr {
    /// A JSON number, string or boolean.
    Literal(Value),
    /// A parameter or `Let` local, by slot.
    Local(usize),
    /// A state variable, by its index in the contract's sorted state.
    State(usize),
    /// `{"Not": a}`.
    Not(Box<Expr>),
    /// `{"<Op>": [a, b]}`.
    Binary(BinOp, Box<Expr>, Box<Expr>),
}
