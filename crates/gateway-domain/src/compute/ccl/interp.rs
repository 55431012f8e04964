//! The CCL interpreter: runs one rule of a parsed contract, charging fuel before every step.
//!
//! Evaluation recurses over the parsed rule; the parser bounded its depth to
//! [`super::MAX_DEPTH`], so the recursion is bounded too. Errors carry the path of the failing
//! node, rebuilt segment by segment while the error unwinds, so a successful run never spends
//! anything on locations. This module deliberately does not parse, look names up, read clocks or
//! iterate over hash maps: the result is a function of the contract, the inputs and the limit.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::ast::{Expr, Rule, Stmt};
use super::value::{self, BinOp, Value};
use super::{Contract, MAX_BUILT_STRING_BYTES, MAX_OUTPUT_BYTES, Outcome, RunResult, STRING_BYTES_PER_FUEL};

/// See [`super::run`].
pub(super) fn run(contract: &Contract, inputs: &BTreeMap<String, String>, fuel_limit: u64) -> RunResult {
    let (rule_index, rule) = match select_rule(contract, inputs) {
        Ok(selected) => selected,
        Err(message) => {
            return RunResult { outcome: Outcome::Failed, output: None, error: Some(message), fuel_used: 0 };
        }
    };
    let mut machine = Machine {
        remaining: fuel_limit,
        slots: vec![None; rule.n_slots],
        state: contract.state_initial.clone(),
        built_string_bytes: 0,
    };
    match machine.run_rule(rule, inputs) {
        Ok(value) => {
            let size = output_size(contract, &value, &machine.state);
            if size > MAX_OUTPUT_BYTES {
                return RunResult {
                    outcome: Outcome::Failed,
                    output: None,
                    error: Some(format!(
                        "output: the output would take up to {size} bytes; an output may take at most {MAX_OUTPUT_BYTES}"
                    )),
                    fuel_used: fuel_limit - machine.remaining,
                };
            }
            let state: serde_json::Map<String, serde_json::Value> = contract
                .state_names
                .iter()
                .zip(&machine.state)
                .map(|(name, value)| (name.clone(), value.to_json()))
                .collect();
            let mut output = serde_json::Map::new();
            output.insert("value".to_owned(), value.to_json());
            output.insert("state".to_owned(), serde_json::Value::Object(state));
            RunResult {
                outcome: Outcome::Success,
                output: Some(serde_json::Value::Object(output)),
                error: None,
                fuel_used: fuel_limit - machine.remaining,
            }
        }
        Err(fault) => {
            let path = render_path(rule_index, &fault.trail);
            match fault.kind {
                FaultKind::OutOfFuel => RunResult {
                    outcome: Outcome::OutOfFuel,
                    output: None,
                    error: Some(format!(
                        "{path}: out of fuel: this step would exceed the limit of {fuel_limit} \
                         units"
                    )),
                    fuel_used: fuel_limit,
                },
                FaultKind::Failed(message) => RunResult {
                    outcome: Outcome::Failed,
                    output: None,
                    error: Some(format!("{path}: {message}")),
                    fuel_used: fuel_limit - machine.remaining,
                },
            }
        }
    }
}

/// The size of `{"value": …, "state": {…}}`, bounded from above without building it.
fn output_size(contract: &Contract, value: &Value, state: &[Value]) -> usize {
    let skeleton = r#"{"value":,"state":{}}"#.len();
    contract.state_names.iter().zip(state).fold(skeleton.saturating_add(value.output_size()), |total, (name, value)| {
        // The quoted name, its colon and a comma.
        total.saturating_add(name.len() + 4).saturating_add(value.output_size())
    })
}

/// The rule named by `inputs["rule"]`, else the first one.
fn select_rule<'c>(contract: &'c Contract, inputs: &BTreeMap<String, String>) -> Result<(usize, &'c Rule), String> {
    match inputs.get("rule") {
        Some(name) => contract.rules.iter().enumerate().find(|(_, rule)| rule.name == *name).ok_or_else(|| {
            const SHOWN: usize = 10;
            let mut known: Vec<String> =
                contract.rules.iter().take(SHOWN).map(|rule| format!("{:?}", rule.name)).collect();
            if contract.rules.len() > SHOWN {
                known.push("…".to_owned());
            }
            format!("inputs.rule: {name:?} is not a rule of this contract; its rules are {}", known.join(", "))
        }),
        None => contract
            .rules
            .first()
            .map(|rule| (0, rule))
            .ok_or_else(|| "code.rules: the contract has no rules".to_owned()),
    }
}

/// One element of an error's path.
#[derive(Debug, Clone, Copy)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

#[derive(Debug)]
enum FaultKind {
    OutOfFuel,
    Failed(String),
}

/// Why a run stopped early, and where: `trail` holds the path from the failing node up to the
/// rule, innermost first, because each level appends its own segment while the error unwinds.
#[derive(Debug)]
struct Fault {
    kind: FaultKind,
    trail: Vec<Seg>,
}

/// A step's result. The fault is boxed so that the success path moves only a value.
type Step<T> = Result<T, Box<Fault>>;

fn failed(message: impl Into<String>) -> Box<Fault> {
    Box::new(Fault { kind: FaultKind::Failed(message.into()), trail: Vec::new() })
}

trait Locate {
    /// Appends `seg` to the path of an error, leaving a success untouched.
    fn at(self, seg: Seg) -> Self;
}

impl<T> Locate for Step<T> {
    fn at(self, seg: Seg) -> Self {
        self.map_err(|mut fault| {
            fault.trail.push(seg);
            fault
        })
    }
}

fn render_path(rule_index: usize, trail: &[Seg]) -> String {
    let mut path = format!("code.rules[{rule_index}]");
    for seg in trail.iter().rev() {
        let _ = match seg {
            Seg::Key(key) => write!(path, ".{key}"),
            Seg::Index(index) => write!(path, "[{index}]"),
        };
    }
    path
}

/// What a statement tells the block that runs it.
#[derive(Debug)]
enum Flow {
    Next,
    Return(Value),
}

/// The extra fuel for touching `bytes` bytes of string data.
fn string_fuel(bytes: usize) -> u64 {
    u64::try_from(bytes / STRING_BYTES_PER_FUEL).unwrap_or(u64::MAX)
}

#[derive(Debug)]
struct Machine {
    remaining: u64,
    /// Parameters, then one slot per `Let` of the rule; `None` until bound. Parsing guarantees
    /// that no slot is read before it is bound, so a `None` read is an internal error.
    slots: Vec<Option<Value>>,
    /// State variables in the contract's sorted order.
    state: Vec<Value>,
    /// Bytes of strings built by `Add` so far, against [`MAX_BUILT_STRING_BYTES`].
    built_string_bytes: usize,
}

impl Machine {
    /// Takes `units` of fuel, or stops the run if fewer remain.
    fn charge(&mut self, units: u64) -> Step<()> {
        if units > self.remaining {
            return Err(Box::new(Fault { kind: FaultKind::OutOfFuel, trail: Vec::new() }));
        }
        self.remaining -= units;
        Ok(())
    }

    /// Starting the rule costs one unit and binding each parameter one more; then the
    /// requirements are checked in order and the body runs.
    fn run_rule(&mut self, rule: &Rule, inputs: &BTreeMap<String, String>) -> Step<Value> {
        self.charge(1)?;
        for (index, param) in rule.params.iter().enumerate() {
            self.bind_param(index, param, inputs).at(Seg::Index(index)).at(Seg::Key("params"))?;
        }
        for (index, requirement) in rule.requires.iter().enumerate() {
            self.check_requirement(requirement).at(Seg::Index(index)).at(Seg::Key("requires"))?;
        }
        match self.exec_block(&rule.body).at(Seg::Key("body"))? {
            Flow::Return(value) => Ok(value),
            Flow::Next => Ok(Value::null()),
        }
    }

    fn bind_param(&mut self, slot: usize, param: &str, inputs: &BTreeMap<String, String>) -> Step<()> {
        self.charge(1)?;
        let Some(text) = inputs.get(param) else {
            return Err(failed(format!("no input named {param:?} was given for this parameter")));
        };
        let value = Value::from_input(text).map_err(|reason| failed(format!("input {param:?}: {reason}")))?;
        self.store_local(slot, value)
    }

    fn check_requirement(&mut self, requirement: &Expr) -> Step<()> {
        match self.eval(requirement)? {
            Value::Bool(true) => Ok(()),
            Value::Bool(false) => Err(failed("the requirement is false")),
            other => Err(failed(format!("a requirement must be a boolean, got {}", other.kind()))),
        }
    }

    fn store_local(&mut self, slot: usize, value: Value) -> Step<()> {
        match self.slots.get_mut(slot) {
            Some(place) => {
                *place = Some(value);
                Ok(())
            }
            None => Err(failed(format!("internal error: no local slot {slot}"))),
        }
    }

    fn exec_block(&mut self, stmts: &[Stmt]) -> Step<Flow> {
        for (index, stmt) in stmts.iter().enumerate() {
            if let Flow::Return(value) = self.exec(stmt).at(Seg::Index(index))? {
                return Ok(Flow::Return(value));
            }
        }
        Ok(Flow::Next)
    }

    fn exec(&mut self, stmt: &Stmt) -> Step<Flow> {
        self.charge(1)?;
        match stmt {
            Stmt::Let { slot, expr } => {
                let value = self.eval(expr).at(Seg::Index(1)).at(Seg::Key("Let"))?;
                self.store_local(*slot, value)?;
                Ok(Flow::Next)
            }
            Stmt::Set { state, expr } => {
                let value = self.eval(expr).at(Seg::Index(1)).at(Seg::Key("Set"))?;
                match self.state.get_mut(*state) {
                    Some(place) => {
                        *place = value;
                        Ok(Flow::Next)
                    }
                    None => Err(failed(format!("internal error: no state variable {state}"))),
                }
            }
            Stmt::If { cond, then_branch, else_branch } => {
                match self.eval(cond).at(Seg::Index(0)).at(Seg::Key("If"))? {
                    Value::Bool(true) => self.exec_block(then_branch).at(Seg::Index(1)).at(Seg::Key("If")),
                    Value::Bool(false) => self.exec_block(else_branch).at(Seg::Index(2)).at(Seg::Key("If")),
                    other => Err(failed(format!("the If condition must be a boolean, got {}", other.kind())))
                        .at(Seg::Index(0))
                        .at(Seg::Key("If")),
                }
            }
            Stmt::Return(expr) => {
                let value = self.eval(expr).at(Seg::Key("Return"))?;
                Ok(Flow::Return(value))
            }
        }
    }

    fn eval(&mut self, expr: &Expr) -> Step<Value> {
        self.charge(1)?;
        match expr {
            Expr::Literal(value) => Ok(value.clone()),
            Expr::Local(slot) => self
                .slots
                .get(*slot)
                .cloned()
                .flatten()
                .ok_or_else(|| failed(format!("internal error: local slot {slot} is unbound"))),
            Expr::State(index) => self
                .state
                .get(*index)
                .cloned()
                .ok_or_else(|| failed(format!("internal error: no state variable {index}"))),
            Expr::Not(operand) => match self.eval(operand).at(Seg::Key("Not"))? {
                Value::Bool(b) => Ok(Value::Bool(!b)),
                other => Err(failed(format!("Not needs a boolean, got {}", other.kind()))),
            },
            Expr::Binary(op @ (BinOp::And | BinOp::Or), left, right) => self.eval_logic(*op, left, right),
            Expr::Binary(op, left, right) => {
                let left = self.eval(left).at(Seg::Index(0)).at(Seg::Key(op.name()))?;
                let right = self.eval(right).at(Seg::Index(1)).at(Seg::Key(op.name()))?;
                self.apply(*op, &left, &right)
            }
        }
    }

    /// `And` and `Or` short-circuit: the right operand is not evaluated (and costs nothing)
    /// when the left one decides, which lets a contract guard an expression that could fail.
    fn eval_logic(&mut self, op: BinOp, left: &Expr, right: &Expr) -> Step<Value> {
        let name = op.name();
        let left = self.eval(left).at(Seg::Index(0)).at(Seg::Key(name))?;
        let Value::Bool(left) = left else {
            return Err(failed(format!("{name} needs two booleans, got {} as its first operand", left.kind())));
        };
        if left == (op == BinOp::Or) {
            return Ok(Value::Bool(left));
        }
        match self.eval(right).at(Seg::Index(1)).at(Seg::Key(name))? {
            Value::Bool(right) => Ok(Value::Bool(right)),
            other => Err(failed(format!("{name} needs two booleans, got {} as its second operand", other.kind()))),
        }
    }

    fn apply(&mut self, op: BinOp, left: &Value, right: &Value) -> Step<Value> {
        match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod => {
                if op == BinOp::Add
                    && let (Value::Str(a), Value::Str(b)) = (left, right)
                {
                    let len = a.len().saturating_add(b.len());
                    self.charge(string_fuel(len))?;
                    let joined = value::concat(a, b).map_err(failed)?;
                    self.built_string_bytes = self.built_string_bytes.saturating_add(len);
                    if self.built_string_bytes > MAX_BUILT_STRING_BYTES {
                        return Err(failed(format!(
                            "this run has built {} bytes of strings; a run may build at most \
                             {MAX_BUILT_STRING_BYTES}",
                            self.built_string_bytes
                        )));
                    }
                    return Ok(joined);
                }
                value::arithmetic(op, left, right).map_err(failed)
            }
            _ => {
                if let (Value::Str(a), Value::Str(b)) = (left, right) {
                    self.charge(string_fuel(a.len().min(b.len())))?;
                }
                value::compare(op, left, right).map(Value::Bool).map_err(failed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value as Json, json};

    use super::super::{Contract, MAX_OUTPUT_BYTES, MAX_STRING_BYTES, Outcome, RunResult, parse_contract, run};
    use super::*;

    /// A contract with one rule `main(a, b)` and the state `{"total": 0, "label": "start",
    /// "doc": {"k": [1]}}`, whose requires and body the tests supply.
    fn contract(requires: Json, body: Json) -> Contract {
        let code = json!({
            "name": "test",
            "participants": ["did:key:z6MkAlice"],
            "currency": "hours",
            "state_vars": {"total": 0, "label": "start", "doc": {"k": [1]}},
            "rules": [
                {"name": "main", "params": ["a", "b"], "requires": requires, "body": body},
                {"name": "other", "params": [], "requires": [], "body": [{"Return": "other ran"}]}
            ],
            "triggers": []
        });
        parse_contract(&code.to_string()).expect("test contract parses")
    }

    fn inputs(a: &str, b: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("a".to_owned(), a.to_owned()), ("b".to_owned(), b.to_owned())])
    }

    /// Runs `main` with a = 7 and b = 2 and generous fuel.
    fn run_body(body: Json) -> RunResult {
        run(&contract(json!([]), body), &inputs("7", "2"), 1_000_000)
    }

    /// The returned value of a successful run.
    fn value_of(result: &RunResult) -> Json {
        assert_eq!(result.outcome, Outcome::Success, "{:?}", result.error);
        result.output.as_ref().expect("success has output")["value"].clone()
    }

    fn returns(expr: Json) -> Json {
        value_of(&run_body(json!([{"Return": expr}])))
    }

    fn error_of(result: &RunResult) -> &str {
        assert_eq!(result.outcome, Outcome::Failed, "{result:?}");
        assert!(result.output.is_none());
        result.error.as_deref().expect("failure has an error")
    }

    fn fails(expr: Json) -> String {
        error_of(&run_body(json!([{"Return": expr}]))).to_owned()
    }

    fn bin(op: &str, a: impl Into<Json>, b: impl Into<Json>) -> Json {
        json!({ op: [a.into(), b.into()] })
    }

    fn var(name: &str) -> Json {
        json!({ "Var": name })
    }

    #[test]
    fn return_ends_the_rule_and_shapes_the_output() {
        let result = run_body(json!([{"Return": 5}, {"Set": ["total", 1]}]));
        assert_eq!(
            result.output,
            Some(json!({"value": 5, "state": {"doc": {"k": [1]}, "label": "start", "total": 0}}))
        );
        assert_eq!(result.error, None);
        // Start 1 + two params 2 + Return 1 + literal 1; the Set after the Return never runs.
        assert_eq!(result.fuel_used, 5);
    }

    #[test]
    fn a_body_without_return_returns_null() {
        let result = run_body(json!([{"Set": ["total", 3]}]));
        assert_eq!(
            result.output,
            Some(json!({"value": null, "state": {"doc": {"k": [1]}, "label": "start", "total": 3}}))
        );
    }

    #[test]
    fn let_binds_and_set_changes_state_visible_in_output() {
        let result = run_body(json!([
            {"Let": ["x", bin("Mul", var("a"), var("b"))]},
            {"Set": ["total", bin("Add", var("total"), var("x"))]},
            {"Set": ["label", "done"]},
            {"Set": ["total", bin("Add", var("total"), 1)]},
            {"Return": var("total")}
        ]));
        assert_eq!(
            result.output,
            Some(json!({"value": 15, "state": {"doc": {"k": [1]}, "label": "done", "total": 15}}))
        );
    }

    #[test]
    fn if_runs_exactly_one_branch() {
        let body = |cond: Json| {
            json!([
                {"If": [cond, [{"Set": ["label", "then"]}], [{"Set": ["label", "else"]}]]},
                {"Return": var("label")}
            ])
        };
        assert_eq!(value_of(&run_body(body(json!(true)))), json!("then"));
        assert_eq!(value_of(&run_body(body(json!(false)))), json!("else"));
        let result = run_body(json!([
            {"If": [bin("Gt", var("a"), var("b")), [{"Return": "a wins"}], [{"Return": "b wins"}]]}
        ]));
        assert_eq!(value_of(&result), json!("a wins"));
    }

    #[test]
    fn if_on_a_non_boolean_fails_at_the_condition() {
        let result = run_body(json!([{"If": [1, [], []]}]));
        assert_eq!(error_of(&result), "code.rules[0].body[0].If[0]: the If condition must be a boolean, got a number");
    }

    #[test]
    fn locals_shadow_state_and_set_still_targets_state() {
        let result = run_body(json!([
            {"Let": ["total", 100]},
            {"Set": ["total", bin("Add", var("total"), 1)]},
            {"Return": var("total")}
        ]));
        assert_eq!(
            result.output,
            Some(json!({"value": 100, "state": {"doc": {"k": [1]}, "label": "start", "total": 101}}))
        );
    }

    #[test]
    fn a_let_inside_a_branch_shadows_only_within_it() {
        let result = run_body(json!([
            {"Let": ["x", 1]},
            {"If": [true, [{"Let": ["x", 2]}, {"Set": ["total", var("x")]}], []]},
            {"Return": var("x")}
        ]));
        assert_eq!(
            result.output,
            Some(json!({"value": 1, "state": {"doc": {"k": [1]}, "label": "start", "total": 2}}))
        );
    }

    #[test]
    fn integer_operators() {
        let cases = [("Add", 9), ("Sub", 5), ("Mul", 14), ("Div", 3), ("Mod", 1)];
        for (op, expected) in cases {
            assert_eq!(returns(bin(op, var("a"), var("b"))), json!(expected), "{op}");
        }
        let comparisons = [("Eq", false), ("Ne", true), ("Lt", false), ("Le", false), ("Gt", true), ("Ge", true)];
        for (op, expected) in comparisons {
            assert_eq!(returns(bin(op, var("a"), var("b"))), json!(expected), "{op}");
        }
        assert_eq!(returns(bin("Le", 2, 2)), json!(true));
        assert_eq!(returns(bin("Eq", 2, 2.0)), json!(true));
    }

    #[test]
    fn float_operators() {
        assert_eq!(returns(bin("Div", 7.0, 2)), json!(3.5));
        assert_eq!(returns(bin("Add", 0.5, 0.25)), json!(0.75));
        assert_eq!(returns(bin("Mod", -7.5, 2)), json!(-1.5));
        assert_eq!(returns(bin("Lt", 2.5, var("a"))), json!(true));
        let result =
            run(&contract(json!([]), json!([{"Return": bin("Mul", var("a"), var("b"))}])), &inputs("1.5", "4"), 100);
        assert_eq!(value_of(&result), json!(6.0));
    }

    #[test]
    fn strings_concatenate_and_compare() {
        assert_eq!(returns(bin("Add", "co", "op")), json!("coop"));
        assert_eq!(returns(bin("Add", var("label"), "!")), json!("start!"));
        assert_eq!(returns(bin("Lt", "apple", "banana")), json!(true));
        assert_eq!(returns(bin("Eq", "x", "x")), json!(true));
    }

    #[test]
    fn logic_operators_short_circuit() {
        assert_eq!(returns(json!({"Not": true})), json!(false));
        assert_eq!(returns(bin("And", true, false)), json!(false));
        assert_eq!(returns(bin("Or", false, true)), json!(true));
        // The right operand would fail; it is not evaluated, and its fuel is not charged.
        let guarded = bin("And", false, bin("Gt", bin("Div", 1, 0), 0));
        let result = run_body(json!([{"Return": guarded}]));
        assert_eq!(value_of(&result), json!(false));
        assert_eq!(result.fuel_used, 3 + 1 + 1 + 1);
        assert_eq!(returns(bin("Or", true, 5)), json!(true));
    }

    #[test]
    fn type_errors_fail_with_the_path_of_the_operator() {
        assert_eq!(
            fails(bin("Add", "a", true)),
            "code.rules[0].body[0].Return: Add needs two numbers or two strings, got a string and a boolean"
        );
        assert_eq!(
            fails(bin("Sub", 1, bin("Mul", "x", 2))),
            "code.rules[0].body[0].Return.Sub[1]: Mul needs two numbers, got a string and a number"
        );
        assert_eq!(
            fails(bin("And", 1, true)),
            "code.rules[0].body[0].Return: And needs two booleans, got a number as its first operand"
        );
        assert_eq!(
            fails(bin("Or", false, "yes")),
            "code.rules[0].body[0].Return: Or needs two booleans, got a string as its second operand"
        );
        assert_eq!(fails(json!({"Not": 0})), "code.rules[0].body[0].Return: Not needs a boolean, got a number");
        assert_eq!(
            fails(bin("Eq", var("a"), "7")),
            "code.rules[0].body[0].Return: Eq needs two numbers, two strings or two booleans, got a number and a string"
        );
        assert_eq!(
            fails(bin("Lt", true, false)),
            "code.rules[0].body[0].Return: Lt needs two numbers or two strings, got a boolean and a boolean"
        );
    }

    #[test]
    fn arithmetic_errors_fail() {
        assert_eq!(fails(bin("Div", var("a"), 0)), "code.rules[0].body[0].Return: division by zero");
        assert_eq!(fails(bin("Mod", var("a"), 0)), "code.rules[0].body[0].Return: modulo by zero");
        assert_eq!(
            fails(bin("Add", i64::MAX, 1)),
            format!("code.rules[0].body[0].Return: integer overflow in Add of {} and 1", i64::MAX)
        );
        assert!(fails(bin("Mul", 1e200, 1e200)).ends_with("overflows the floating-point range"));
        assert_eq!(fails(bin("Div", 1.5, 0)), "code.rules[0].body[0].Return: division by zero");
    }

    #[test]
    fn non_scalar_state_can_be_moved_but_not_operated_on() {
        let result = run_body(json!([
            {"Set": ["label", var("doc")]},
            {"Return": var("doc")}
        ]));
        assert_eq!(
            result.output,
            Some(json!({"value": {"k": [1]}, "state": {"doc": {"k": [1]}, "label": {"k": [1]}, "total": 0}}))
        );
        assert_eq!(
            fails(bin("Eq", var("doc"), var("doc"))),
            "code.rules[0].body[0].Return: Eq needs two numbers, two strings or two booleans, got an object and an object"
        );
    }

    #[test]
    fn strings_built_at_run_time_are_capped() {
        // Doubling a 1 KiB string six times reaches 64 KiB; the seventh doubling exceeds it.
        let mut body = vec![json!({"Let": ["s", "x".repeat(1024)]})];
        for _ in 0..6 {
            body.push(json!({"Let": ["s", bin("Add", var("s"), var("s"))]}));
        }
        let mut fits = body.clone();
        fits.push(json!({"Return": bin("Eq", var("s"), var("s"))}));
        assert_eq!(value_of(&run_body(Json::Array(fits))), json!(true));
        body.push(json!({"Return": bin("Add", var("s"), "!")}));
        assert_eq!(
            error_of(&run_body(Json::Array(body))),
            format!(
                "code.rules[0].body[7].Return: Add would make a string of {} bytes; a string is at most {MAX_STRING_BYTES}",
                MAX_STRING_BYTES + 1
            )
        );
    }

    /// A 64 KiB string `s` built from a 1 KiB literal by six doublings (126 KiB built).
    fn build_maximal_string() -> Vec<Json> {
        let mut body = vec![json!({"Let": ["s", "x".repeat(1024)]})];
        for _ in 0..6 {
            body.push(json!({"Let": ["s", bin("Add", var("s"), var("s"))]}));
        }
        body
    }

    #[test]
    fn a_run_builds_at_most_one_mebibyte_of_strings() {
        // 126 KiB, then copies of 64 KiB each: fourteen fit under 1 MiB, the fifteenth does not.
        let mut body = build_maximal_string();
        for _ in 0..14 {
            body.push(json!({"Let": ["t", bin("Add", var("s"), "")]}));
        }
        let mut fits = body.clone();
        fits.push(json!({"Return": 1}));
        assert_eq!(value_of(&run_body(Json::Array(fits))), json!(1));
        body.push(json!({"Let": ["t", bin("Add", var("s"), "")]}));
        body.push(json!({"Return": 1}));
        let built = 126 * 1024 + 15 * 65_536;
        assert_eq!(
            error_of(&run_body(Json::Array(body))),
            format!(
                "code.rules[0].body[21].Let[1]: this run has built {built} bytes of strings; a run may build at most 1048576"
            )
        );
    }

    #[test]
    fn outputs_are_capped_before_they_are_built() {
        // Each state variable set to the 64 KiB string adds 65 538 bytes and a few for its name.
        let contract_setting = |copies: usize| {
            let names: Vec<String> = (0..copies).map(|i| format!("v{i:02}")).collect();
            let mut body = build_maximal_string();
            body.extend(names.iter().map(|name| json!({"Set": [name, var("s")]})));
            let state: serde_json::Map<String, Json> = names.iter().map(|name| (name.clone(), json!(0))).collect();
            let code = json!({
                "name": "big", "participants": [], "currency": "hours", "state_vars": state,
                "rules": [{"name": "r", "params": [], "requires": [], "body": body}],
                "triggers": []
            });
            parse_contract(&code.to_string()).unwrap()
        };
        let fits = run(&contract_setting(15), &BTreeMap::new(), 1_000_000);
        assert_eq!(fits.outcome, Outcome::Success, "{:?}", fits.error);
        let output_len = fits.output.as_ref().unwrap().to_string().len();
        assert!(output_len <= MAX_OUTPUT_BYTES && output_len > 15 * 65_536);
        let too_big = run(&contract_setting(16), &BTreeMap::new(), 1_000_000);
        // 16 strings of 65 538 bytes, 16 names of 3 bytes + 4, the skeleton
        // `{"value":,"state":{}}` of 21 bytes and the `null` value of 4.
        let size = 16 * 65_538 + 16 * 7 + 21 + 4;
        assert_eq!(
            error_of(&too_big),
            format!("output: the output would take up to {size} bytes; an output may take at most 1048576")
        );
    }

    #[test]
    fn string_work_costs_fuel_by_length() {
        let long = "y".repeat(64);
        // Start 3, Return 1, Add 1, two literals 2, and 128 bytes of result: 2 more.
        let result = run_body(json!([{"Return": bin("Add", long.clone(), long.clone())}]));
        assert_eq!(result.fuel_used, 9);
        // Comparing charges for the shorter operand only: 64 bytes, one unit.
        let result = run_body(json!([{"Return": bin("Lt", long.clone(), format!("{long}{long}"))}]));
        assert_eq!(result.fuel_used, 8);
        // Short strings cost nothing extra.
        let result = run_body(json!([{"Return": bin("Add", "a", "b")}]));
        assert_eq!(result.fuel_used, 7);
    }

    #[test]
    fn requires_are_checked_in_order_before_the_body() {
        let body = json!([{"Set": ["total", 1]}, {"Return": true}]);
        let passes = contract(json!([bin("Gt", var("a"), 0), bin("Lt", var("b"), 10)]), body.clone());
        assert_eq!(run(&passes, &inputs("7", "2"), 100).outcome, Outcome::Success);
        let result = run(&passes, &inputs("7", "20"), 100);
        assert_eq!(error_of(&result), "code.rules[0].requires[1]: the requirement is false");
        // Start 3 and two requirements of 3 each: the body never ran.
        assert_eq!(result.fuel_used, 9);
        let not_boolean = contract(json!([var("a")]), body);
        assert_eq!(
            error_of(&run(&not_boolean, &inputs("7", "2"), 100)),
            "code.rules[0].requires[0]: a requirement must be a boolean, got a number"
        );
    }

    #[test]
    fn the_rule_input_selects_the_rule() {
        let contract = contract(json!([]), json!([{"Return": "main ran"}]));
        let mut by_name = BTreeMap::from([("rule".to_owned(), "other".to_owned())]);
        assert_eq!(value_of(&run(&contract, &by_name, 100)), json!("other ran"));
        by_name.insert("rule".to_owned(), "main".to_owned());
        by_name.extend(inputs("1", "2"));
        assert_eq!(value_of(&run(&contract, &by_name, 100)), json!("main ran"));
        assert_eq!(value_of(&run(&contract, &inputs("1", "2"), 100)), json!("main ran"));
    }

    #[test]
    fn an_unknown_rule_fails_without_using_fuel() {
        let contract = contract(json!([]), json!([]));
        let inputs = BTreeMap::from([("rule".to_owned(), "missing".to_owned())]);
        let result = run(&contract, &inputs, 100);
        assert_eq!(
            error_of(&result),
            "inputs.rule: \"missing\" is not a rule of this contract; its rules are \"main\", \"other\""
        );
        assert_eq!(result.fuel_used, 0);
    }

    #[test]
    fn a_missing_parameter_fails_naming_it() {
        let contract = contract(json!([]), json!([]));
        let only_a = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
        let result = run(&contract, &only_a, 100);
        assert_eq!(error_of(&result), "code.rules[0].params[1]: no input named \"b\" was given for this parameter");
        assert_eq!(result.fuel_used, 3);
    }

    #[test]
    fn numeric_strings_bind_as_numbers_and_others_as_strings() {
        let contract = contract(json!([]), json!([{"Return": bin("Add", var("a"), var("b"))}]));
        assert_eq!(value_of(&run(&contract, &inputs("40", "2"), 100)), json!(42));
        assert_eq!(value_of(&run(&contract, &inputs("007", "-1"), 100)), json!(6));
        assert_eq!(value_of(&run(&contract, &inputs("2.5", "1"), 100)), json!(3.5));
        assert_eq!(value_of(&run(&contract, &inputs("co", "op"), 100)), json!("coop"));
        assert_eq!(value_of(&run(&contract, &inputs("NaN", "!"), 100)), json!("NaN!"));
        assert_eq!(
            error_of(&run(&contract, &inputs("abc", "1"), 100)),
            "code.rules[0].body[0].Return: Add needs two numbers or two strings, got a string and a number"
        );
        let long = "z".repeat(MAX_STRING_BYTES + 1);
        assert!(
            error_of(&run(&contract, &inputs(&long, "1"), 100))
                .starts_with("code.rules[0].params[0]: input \"a\": a string is at most 65536 bytes")
        );
    }

    #[test]
    fn each_step_costs_one_unit() {
        // Start 1, params 2; Let 1 + Add 1 + 2 operands; If 1 + literal 1; Set 1 + literal 1;
        // Return 1 + Var 1.
        let result = run_body(json!([
            {"Let": ["x", bin("Add", var("a"), 1)]},
            {"If": [true, [{"Set": ["total", 5]}], [{"Set": ["total", bin("Mul", 1, 2)]}]]},
            {"Return": var("x")}
        ]));
        assert_eq!(value_of(&result), json!(8));
        assert_eq!(result.fuel_used, 3 + 4 + 2 + 2 + 2);
    }

    #[test]
    fn fuel_boundary_is_exact() {
        let contract = contract(
            json!([bin("Gt", var("a"), 0)]),
            json!([
                {"Let": ["x", bin("Mul", var("a"), var("b"))]},
                {"If": [bin("Ge", var("x"), 10), [{"Set": ["total", var("x")]}], []]},
                {"Return": bin("Add", var("x"), var("total"))}
            ]),
        );
        let inputs = inputs("7", "2");
        let full = run(&contract, &inputs, u64::MAX);
        assert_eq!(value_of(&full), json!(28));
        let needed = full.fuel_used;
        // Start 3, requires 3, Let 4, If 4, Set 2, Return 4.
        assert_eq!(needed, 3 + 3 + 4 + 4 + 2 + 4);
        let exact = run(&contract, &inputs, needed);
        assert_eq!(exact, full);
        let short = run(&contract, &inputs, needed - 1);
        assert_eq!(short.outcome, Outcome::OutOfFuel);
        assert_eq!(short.output, None);
        assert_eq!(short.fuel_used, needed - 1);
        assert_eq!(
            short.error.as_deref(),
            Some(&*format!(
                "code.rules[0].body[2].Return.Add[1]: out of fuel: this step would exceed the limit of {} units",
                needed - 1
            ))
        );
        let nothing = run(&contract, &inputs, 0);
        assert_eq!(nothing.outcome, Outcome::OutOfFuel);
        assert_eq!(nothing.fuel_used, 0);
        assert_eq!(
            nothing.error.as_deref(),
            Some("code.rules[0]: out of fuel: this step would exceed the limit of 0 units")
        );
    }

    #[test]
    fn a_failed_run_reports_the_fuel_it_used() {
        let result = run_body(json!([{"Let": ["x", 1]}, {"Return": bin("Div", var("x"), 0)}]));
        error_of(&result);
        // Start 3, Let 2, Return 1 + Div 1 + operands 2.
        assert_eq!(result.fuel_used, 9);
    }

    #[test]
    fn running_twice_gives_the_same_result() {
        let contract = contract(
            json!([]),
            json!([
                {"Let": ["f", bin("Div", var("a"), 3.0)]},
                {"Set": ["label", bin("Add", var("label"), "-x")]},
                {"Return": var("f")}
            ]),
        );
        let first = run(&contract, &inputs("7", "2"), 1_000);
        let second = run(&contract, &inputs("7", "2"), 1_000);
        assert_eq!(first, second);
        assert_eq!(value_of(&first), json!(7.0 / 3.0));
    }
}
