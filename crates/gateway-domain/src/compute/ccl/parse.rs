//! From the `code` string to a [`Contract`]: JSON decoding, validation of every field with the
//! path of the first offending part, and static resolution of variables to slots.
//!
//! Resolution follows the run-time scoping rules exactly (see `docs/CCL.md`), so a contract that
//! parses never meets an unknown variable or an unknown `Set` target at run time. This module
//! deliberately does not evaluate anything, not even constant expressions: every run-time error
//! is reported by the interpreter, with the fuel it cost.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gateway_core::{Currency, Did};
use serde_json::{Map, Value as Json};

use super::ast::{Expr, Rule, Stmt, Trigger};
use super::value::{BinOp, Value};
use super::{CclError, Contract, MAX_CODE_BYTES, MAX_DEPTH};

/// See [`super::parse_contract`].
pub(super) fn parse_contract(code: &str) -> Result<Contract, CclError> {
    if code.len() > MAX_CODE_BYTES {
        return Err(error_at("code", format!("is {} bytes; a contract is at most {MAX_CODE_BYTES} bytes", code.len())));
    }
    let json: Json = match serde_json::from_str(code) {
        Ok(json) => json,
        Err(err) => {
            let looks_like_json =
                code.trim_start().starts_with(['{', '[', '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
            let message = if looks_like_json {
                format!(
                    "is not valid JSON ({err}); only the JSON-serialised contract structure is \
                     accepted"
                )
            } else {
                "is not JSON: only the JSON-serialised contract structure (an object with name, \
                 participants, currency, state_vars, rules and triggers) is accepted, not contract \
                 source text"
                    .to_owned()
            };
            return Err(error_at("code", message));
        }
    };
    let Json::Object(top) = &json else {
        return Err(error_at(
            "code",
            format!(
                "must be a JSON object (the serialised contract structure with name, \
                 participants, currency, state_vars, rules and triggers), got {}",
                json_kind(&json)
            ),
        ));
    };
    Parser::new().contract(top)
}

fn error_at(field: &str, message: String) -> CclError {
    CclError { field: field.to_owned(), message }
}

/// The JSON type of a value with its article, for "got …" messages.
fn json_kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// One element of a path.
#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// The `Let` and parameter bindings visible at a point of a rule. A name maps to a stack of
/// slots so that an inner `Let` shadows an outer binding and leaving a branch uncovers it again;
/// `log` records the order of bindings so a branch's can be undone.
#[derive(Debug, Default)]
struct Scope<'j> {
    bindings: BTreeMap<&'j str, Vec<usize>>,
    log: Vec<&'j str>,
    n_slots: usize,
}

impl<'j> Scope<'j> {
    fn bind(&mut self, name: &'j str) -> usize {
        let slot = self.n_slots;
        self.n_slots += 1;
        self.bindings.entry(name).or_default().push(slot);
        self.log.push(name);
        slot
    }

    fn lookup(&self, name: &str) -> Option<usize> {
        self.bindings.get(name).and_then(|slots| slots.last().copied())
    }

    fn mark(&self) -> usize {
        self.log.len()
    }

    fn reset(&mut self, mark: usize) {
        while self.log.len() > mark {
            let Some(name) = self.log.pop() else { break };
            if let Some(slots) = self.bindings.get_mut(name) {
                slots.pop();
                if slots.is_empty() {
                    self.bindings.remove(name);
                }
            }
        }
    }
}

struct Parser<'j> {
    /// The path of the part being parsed, starting with `code`; segments are appended on the way
    /// down and truncated on the way up, so an error only has to copy it.
    path: String,
    /// State variable name → index in the sorted state.
    state: BTreeMap<&'j str, usize>,
    scope: Scope<'j>,
}

impl<'j> Parser<'j> {
    fn new() -> Self {
        Parser { path: "code".to_owned(), state: BTreeMap::new(), scope: Scope::default() }
    }

    fn error(&self, message: impl Into<String>) -> CclError {
        CclError { field: self.path.clone(), message: message.into() }
    }

    /// Runs `f` with `seg` appended to the path.
    fn at<T>(&mut self, seg: Seg<'_>, f: impl FnOnce(&mut Self) -> Result<T, CclError>) -> Result<T, CclError> {
        let len = self.path.len();
        match seg {
            Seg::Key(key) if is_plain_key(key) => {
                self.path.push('.');
                self.path.push_str(key);
            }
            Seg::Key(key) => {
                // A key that would make the path ambiguous is written as a JSON string.
                let quoted = serde_json::to_string(key).unwrap_or_default();
                let _ = write!(self.path, "[{quoted}]");
            }
            Seg::Index(index) => {
                let _ = write!(self.path, "[{index}]");
            }
        }
        let result = f(self);
        self.path.truncate(len);
        result
    }

    fn contract(&mut self, top: &'j Map<String, Json>) -> Result<Contract, CclError> {
        let name = self.at(Seg::Key("name"), |p| p.non_empty_string(field(top, "name"), "the contract's name"))?;
        let participants = self.at(Seg::Key("participants"), |p| p.participants(top))?;
        let currency = self.at(Seg::Key("currency"), |p| {
            let text = p.string(field(top, "currency"), "a currency code")?;
            Currency::parse(text).map_err(|reason| p.error(reason))
        })?;
        let (state_names, state_initial) = self.at(Seg::Key("state_vars"), |p| p.state_vars(top))?;
        let rules = self.at(Seg::Key("rules"), |p| p.rules(top))?;
        let triggers = self.at(Seg::Key("triggers"), |p| p.triggers(top, &rules))?;
        Ok(Contract { name: name.to_owned(), participants, currency, state_names, state_initial, rules, triggers })
    }

    fn participants(&mut self, top: &'j Map<String, Json>) -> Result<Vec<Did>, CclError> {
        let items = self.array(field(top, "participants"), "an array of DIDs")?;
        let mut participants = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let did = self.at(Seg::Index(index), |p| {
                let text = p.string(Some(item), "a DID such as did:key:z6Mk…")?;
                Did::parse(text).map_err(|reason| p.error(format!("{text:?} is not a DID: {reason}")))
            })?;
            participants.push(did);
        }
        Ok(participants)
    }

    fn state_vars(&mut self, top: &'j Map<String, Json>) -> Result<(Vec<String>, Vec<Value>), CclError> {
        let Some(json) = field(top, "state_vars") else {
            return Err(self.error("is required (an object of name → initial value; {} for none)"));
        };
        let Json::Object(vars) = json else {
            return Err(self.error(format!("must be an object of name → initial value, got {}", json_kind(json))));
        };
        // Sorted by name whatever the map's own order, so that the output's order and the
        // indices never depend on serde_json's features.
        let sorted: BTreeMap<&'j str, &'j Json> = vars.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut names = Vec::with_capacity(sorted.len());
        let mut initial = Vec::with_capacity(sorted.len());
        for (index, (name, json)) in sorted.into_iter().enumerate() {
            let value = self.at(Seg::Key(name), |p| {
                if name.is_empty() {
                    return Err(p.error("a state variable's name must not be empty"));
                }
                Value::from_json(json).map_err(|reason| p.error(reason))
            })?;
            self.state.insert(name, index);
            names.push(name.to_owned());
            initial.push(value);
        }
        Ok((names, initial))
    }

    fn rules(&mut self, top: &'j Map<String, Json>) -> Result<Vec<Rule>, CclError> {
        let items = self.array(field(top, "rules"), "an array of rules")?;
        if items.is_empty() {
            return Err(self.error("a contract needs at least one rule"));
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let rule = self.at(Seg::Index(index), |p| p.rule(item))?;
            if rules.iter().any(|earlier| earlier.name == rule.name) {
                return self.at(Seg::Index(index), |p| {
                    p.at(Seg::Key("name"), |p| Err(p.error(format!("another rule is already named {:?}", rule.name))))
                });
            }
            rules.push(rule);
        }
        Ok(rules)
    }

    fn rule(&mut self, json: &'j Json) -> Result<Rule, CclError> {
        let Json::Object(rule) = json else {
            return Err(self
                .error(format!("a rule is an object with name, params, requires and body, got {}", json_kind(json))));
        };
        let name = self.at(Seg::Key("name"), |p| p.non_empty_string(field(rule, "name"), "the rule's name"))?;
        self.scope = Scope::default();
        let params = self.at(Seg::Key("params"), |p| {
            let items = p.array(field(rule, "params"), "an array of parameter names")?;
            let mut params = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                let param = p.at(Seg::Index(index), |p| {
                    let param = p.non_empty_string(Some(item), "a parameter name")?;
                    if p.scope.lookup(param).is_some() {
                        return Err(p.error(format!("parameter {param:?} is listed twice")));
                    }
                    Ok(param)
                })?;
                p.scope.bind(param);
                params.push(param.to_owned());
            }
            Ok(params)
        })?;
        let requires = self.at(Seg::Key("requires"), |p| {
            let items = p.array(field(rule, "requires"), "an array of expressions")?;
            let mut requires = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                requires.push(p.at(Seg::Index(index), |p| p.expr(item, 1))?);
            }
            Ok(requires)
        })?;
        let body = self.at(Seg::Key("body"), |p| {
            let items = p.array(field(rule, "body"), "an array of statements")?;
            p.block(items, 1)
        })?;
        Ok(Rule { name: name.to_owned(), params, requires, body, n_slots: self.scope.n_slots })
    }

    fn triggers(&mut self, top: &'j Map<String, Json>, rules: &[Rule]) -> Result<Vec<Trigger>, CclError> {
        let items = self.array(field(top, "triggers"), "an array of {rule, on} objects")?;
        let mut triggers = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let trigger = self.at(Seg::Index(index), |p| {
                let Json::Object(trigger) = item else {
                    return Err(p.error(format!("a trigger is an object with rule and on, got {}", json_kind(item))));
                };
                let rule = p.at(Seg::Key("rule"), |p| {
                    let rule = p.string(field(trigger, "rule"), "the name of a rule")?;
                    if rules.iter().any(|known| known.name == rule) {
                        Ok(rule)
                    } else {
                        Err(p.error(format!("{rule:?} is not the name of a rule of this contract")))
                    }
                })?;
                let on = p.at(Seg::Key("on"), |p| p.string(field(trigger, "on"), "an event name"))?;
                Ok(Trigger { rule: rule.to_owned(), on: on.to_owned() })
            })?;
            triggers.push(trigger);
        }
        Ok(triggers)
    }

    /// Parses a list of statements at `depth`. `Let` bindings made inside it stay visible to the
    /// statements after them in the same list and to their nested branches, and vanish at its end.
    fn block(&mut self, items: &'j [Json], depth: usize) -> Result<Vec<Stmt>, CclError> {
        let mark = self.scope.mark();
        let mut stmts = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            match self.at(Seg::Index(index), |p| p.stmt(item, depth)) {
                Ok(stmt) => stmts.push(stmt),
                Err(err) => {
                    self.scope.reset(mark);
                    return Err(err);
                }
            }
        }
        self.scope.reset(mark);
        Ok(stmts)
    }

    fn stmt(&mut self, json: &'j Json, depth: usize) -> Result<Stmt, CclError> {
        if depth > MAX_DEPTH {
            return Err(self.error(format!("statements and expressions nest deeper than {MAX_DEPTH} levels")));
        }
        const FORMS: &str = "a statement is an object with exactly one key: Let, Set, If or Return";
        let Some((form, args)) = single_entry(json) else {
            return Err(self.error(format!("{FORMS}; got {}", describe_object(json))));
        };
        self.at(Seg::Key(form), |p| match form {
            "Let" => {
                let [name, expr] = p.tuple::<2>(args, "[name, expression]")?;
                let name = p.at(Seg::Index(0), |p| p.non_empty_string(Some(name), "the name of the new variable"))?;
                // The expression is resolved before the new binding exists, so
                // `Let x = x + 1` reads the previous `x`.
                let expr = p.at(Seg::Index(1), |p| p.expr(expr, depth + 1))?;
                let slot = p.scope.bind(name);
                Ok(Stmt::Let { slot, expr })
            }
            "Set" => {
                let [name, expr] = p.tuple::<2>(args, "[state variable, expression]")?;
                let state = p.at(Seg::Index(0), |p| {
                    let name = p.string(Some(name), "the name of a state variable")?;
                    p.state.get(name).copied().ok_or_else(|| {
                        p.error(format!(
                            "{name:?} is not a state variable; Set can only assign the \
                             variables declared in code.state_vars"
                        ))
                    })
                })?;
                let expr = p.at(Seg::Index(1), |p| p.expr(expr, depth + 1))?;
                Ok(Stmt::Set { state, expr })
            }
            "If" => {
                let [cond, then_branch, else_branch] = p.tuple::<3>(args, "[condition, [statements], [statements]]")?;
                let cond = p.at(Seg::Index(0), |p| p.expr(cond, depth + 1))?;
                let then_branch = p.at(Seg::Index(1), |p| {
                    let items = p.array(Some(then_branch), "an array of statements")?;
                    p.block(items, depth + 1)
                })?;
                let else_branch = p.at(Seg::Index(2), |p| {
                    let items = p.array(Some(else_branch), "an array of statements")?;
                    p.block(items, depth + 1)
                })?;
                Ok(Stmt::If { cond, then_branch, else_branch })
            }
            "Return" => Ok(Stmt::Return(p.expr(args, depth + 1)?)),
            other => Err(p.error(format!("{other:?} is not a statement; {FORMS}"))),
        })
    }

    fn expr(&mut self, json: &'j Json, depth: usize) -> Result<Expr, CclError> {
        if depth > MAX_DEPTH {
            return Err(self.error(format!("statements and expressions nest deeper than {MAX_DEPTH} levels")));
        }
        const FORMS: &str = "an expression is a number, a string, a boolean, {\"Var\": name}, \
                             {\"Not\": expression} or {\"<Op>\": [a, b]} with Op one of Add, Sub, \
                             Mul, Div, Mod, Eq, Ne, Lt, Le, Gt, Ge, And, Or";
        match json {
            Json::Bool(b) => Ok(Expr::Literal(Value::Bool(*b))),
            Json::Number(n) => Value::from_number(n)
                .map(Expr::Literal)
                .ok_or_else(|| self.error(format!("the number {n} is not finite"))),
            Json::String(s) => Value::string(s).map(Expr::Literal).map_err(|reason| self.error(reason)),
            Json::Null | Json::Array(_) => {
                Err(self.error(format!("{} is not an expression; {FORMS}", json_kind(json))))
            }
            Json::Object(_) => {
                let Some((form, args)) = single_entry(json) else {
                    return Err(self.error(format!("{FORMS}; got {}", describe_object(json))));
                };
                self.at(Seg::Key(form), |p| {
                    if form == "Var" {
                        let name = p.string(Some(args), "a variable name")?;
                        return p.resolve(name);
                    }
                    if form == "Not" {
                        return Ok(Expr::Not(Box::new(p.expr(args, depth + 1)?)));
                    }
                    let Some(op) = BinOp::from_name(form) else {
                        return Err(p.error(format!("{form:?} is not an expression; {FORMS}")));
                    };
                    let [left, right] = p.tuple::<2>(args, "[left, right]")?;
                    let left = p.at(Seg::Index(0), |p| p.expr(left, depth + 1))?;
                    let right = p.at(Seg::Index(1), |p| p.expr(right, depth + 1))?;
                    Ok(Expr::Binary(op, Box::new(left), Box::new(right)))
                })
            }
        }
    }

    /// Locals (the innermost visible `Let`, then parameters) shadow state variables.
    fn resolve(&self, name: &str) -> Result<Expr, CclError> {
        if let Some(slot) = self.scope.lookup(name) {
            return Ok(Expr::Local(slot));
        }
        if let Some(&index) = self.state.get(name) {
            return Ok(Expr::State(index));
        }
        Err(self.error(format!(
            "unknown variable {name:?}: it is not a parameter of this rule, a Let binding in \
             scope here, or a state variable"
        )))
    }

    fn tuple<const N: usize>(&self, json: &'j Json, shape: &str) -> Result<[&'j Json; N], CclError> {
        let wrong = || self.error(format!("must be an array of {N} elements: {shape}"));
        let Json::Array(items) = json else {
            return Err(wrong());
        };
        <&'j [Json; N]>::try_from(items.as_slice()).map(|array| array.each_ref()).map_err(|_| wrong())
    }

    fn array(&self, json: Option<&'j Json>, what: &str) -> Result<&'j [Json], CclError> {
        match json {
            None => Err(self.error(format!("is required ({what})"))),
            Some(Json::Array(items)) => Ok(items),
            Some(other) => Err(self.error(format!("must be {what}, got {}", json_kind(other)))),
        }
    }

    fn string(&self, json: Option<&'j Json>, what: &str) -> Result<&'j str, CclError> {
        match json {
            None => Err(self.error(format!("is required ({what})"))),
            Some(Json::String(text)) => Ok(text),
            Some(other) => Err(self.error(format!("must be a string ({what}), got {}", json_kind(other)))),
        }
    }

    fn non_empty_string(&self, json: Option<&'j Json>, what: &str) -> Result<&'j str, CclError> {
        let text = self.string(json, what)?;
        if text.is_empty() {
            return Err(self.error(format!("must not be empty ({what})")));
        }
        Ok(text)
    }
}

fn field<'j>(object: &'j Map<String, Json>, key: &str) -> Option<&'j Json> {
    object.get(key)
}

/// The only entry of a one-key object.
fn single_entry(json: &Json) -> Option<(&str, &Json)> {
    match json {
        Json::Object(object) if object.len() == 1 => object.iter().next().map(|(k, v)| (k.as_str(), v)),
        _ => None,
    }
}

/// "an object with keys a, b" or the JSON kind, for messages about malformed forms.
fn describe_object(json: &Json) -> String {
    match json {
        Json::Object(object) if object.is_empty() => "an empty object".to_owned(),
        Json::Object(object) => {
            let keys: Vec<&str> = object.keys().take(5).map(String::as_str).collect();
            let more = if object.len() > 5 { ", …" } else { "" };
            format!("an object with keys {}{more}", keys.join(", "))
        }
        other => json_kind(other).to_owned(),
    }
}

/// Whether a key can be written after a dot without making the path ambiguous.
fn is_plain_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A valid contract with one rule, whose parts the tests replace.
    fn base() -> Json {
        json!({
            "name": "c",
            "participants": ["did:key:z6MkAlice", "did:web:example.org"],
            "currency": "hours",
            "state_vars": {"total": 0, "flag": false, "label": "x", "list": [1, 2]},
            "rules": [
                {"name": "r0", "params": ["a", "b"], "requires": [], "body": []},
                {"name": "r1", "params": [], "requires": [], "body": []}
            ],
            "triggers": [{"rule": "r1", "on": "tick"}]
        })
    }

    fn with(pointer: &str, value: Json) -> String {
        let mut contract = base();
        *contract.pointer_mut(pointer).expect("pointer exists") = value;
        contract.to_string()
    }

    fn adding(key: &str, value: Json) -> String {
        let mut contract = base();
        contract.as_object_mut().unwrap().insert(key.to_owned(), value);
        contract.to_string()
    }

    fn without(key: &str) -> String {
        let mut contract = base();
        contract.as_object_mut().unwrap().remove(key);
        contract.to_string()
    }

    fn body(stmts: Json) -> String {
        with("/rules/0/body", stmts)
    }

    fn err(code: &str) -> CclError {
        parse_contract(code).expect_err("should not parse")
    }

    #[test]
    fn a_valid_contract_parses_with_sorted_state() {
        let contract = parse_contract(&base().to_string()).unwrap();
        assert_eq!(contract.name, "c");
        assert_eq!(contract.state_names, ["flag", "label", "list", "total"]);
        assert_eq!(contract.rules.len(), 2);
        assert_eq!(contract.rules[0].n_slots, 2);
        assert_eq!(contract.triggers[0].on, "tick");
    }

    #[test]
    fn source_text_is_rejected_with_a_clear_message() {
        let e = err("contract Foo { state x: int; }");
        assert_eq!(e.field, "code");
        assert!(e.message.contains("not contract source text"), "{}", e.message);
        assert!(e.message.contains("JSON-serialised contract structure"), "{}", e.message);
    }

    #[test]
    fn invalid_json_and_non_objects_are_rejected() {
        let e = err("{\"name\": ");
        assert_eq!(e.field, "code");
        assert!(e.message.starts_with("is not valid JSON"), "{}", e.message);
        let e = err("[1, 2]");
        assert_eq!(e.field, "code");
        assert!(e.message.contains("got an array"), "{}", e.message);
        let e = err("");
        assert_eq!(e.field, "code");
    }

    #[test]
    fn oversized_code_is_rejected_before_decoding() {
        let code = format!("{{\"name\": \"{}\"}}", "x".repeat(MAX_CODE_BYTES));
        let e = err(&code);
        assert_eq!(e.field, "code");
        assert!(e.message.contains("at most 262144 bytes"), "{}", e.message);
    }

    #[test]
    fn top_level_fields_are_required_and_typed() {
        for key in ["name", "participants", "currency", "state_vars", "rules", "triggers"] {
            let e = err(&without(key));
            assert_eq!(e.field, format!("code.{key}"));
            assert!(e.message.starts_with("is required"), "{key}: {}", e.message);
        }
        assert_eq!(err(&with("/name", json!(7))).field, "code.name");
        assert_eq!(err(&with("/name", json!(""))).field, "code.name");
        assert_eq!(err(&with("/participants", json!("did:key:z"))).field, "code.participants");
        assert_eq!(err(&with("/state_vars", json!([]))).field, "code.state_vars");
        assert_eq!(err(&with("/rules", json!({}))).field, "code.rules");
        assert_eq!(err(&with("/triggers", json!(null))).field, "code.triggers");
    }

    #[test]
    fn participants_must_be_dids() {
        let e = err(&with("/participants/1", json!("alice")));
        assert_eq!(e.field, "code.participants[1]");
        assert!(e.message.contains("is not a DID"), "{}", e.message);
        let code = with("/participants", json!(["did:key:a", "did:key:b", "did:Key:c"]));
        assert_eq!(err(&code).field, "code.participants[2]");
        assert_eq!(err(&with("/participants/0", json!(1))).field, "code.participants[0]");
    }

    #[test]
    fn currency_is_validated() {
        let e = err(&with("/currency", json!("us-d")));
        assert_eq!(e.field, "code.currency");
        assert_eq!(e.message, "currency may only contain A-Z, a-z, 0-9 and '_'");
    }

    #[test]
    fn state_vars_are_validated() {
        let e = err(&with("/state_vars", json!({"": 1})));
        assert_eq!(e.field, "code.state_vars[\"\"]");
        let long = "y".repeat(super::super::MAX_STRING_BYTES + 1);
        let e = err(&with("/state_vars", json!({"big text": long})));
        assert_eq!(e.field, "code.state_vars[\"big text\"]");
        assert!(e.message.contains("at most 65536 bytes"), "{}", e.message);
    }

    #[test]
    fn rules_are_validated_with_their_paths() {
        assert_eq!(err(&with("/rules", json!([]))).field, "code.rules");
        assert_eq!(err(&with("/rules/1", json!("r"))).field, "code.rules[1]");
        assert_eq!(err(&with("/rules/1/name", json!("r0"))).field, "code.rules[1].name");
        assert_eq!(err(&with("/rules/1/params", json!([1]))).field, "code.rules[1].params[0]");
        assert_eq!(err(&with("/rules/1/params", json!([""]))).field, "code.rules[1].params[0]");
        let e = err(&with("/rules/0/params", json!(["a", "b", "a"])));
        assert_eq!(e.field, "code.rules[0].params[2]");
        assert!(e.message.contains("listed twice"), "{}", e.message);
        assert_eq!(err(&with("/rules/0/requires", json!([true, null]))).field, "code.rules[0].requires[1]");
        assert_eq!(err(&with("/rules/0/body", json!({}))).field, "code.rules[0].body");
        let mut no_requires = base();
        no_requires["rules"][1].as_object_mut().unwrap().remove("requires");
        assert_eq!(err(&no_requires.to_string()).field, "code.rules[1].requires");
    }

    #[test]
    fn triggers_must_name_existing_rules() {
        let e = err(&with("/triggers/0/rule", json!("r9")));
        assert_eq!(e.field, "code.triggers[0].rule");
        assert!(e.message.contains("not the name of a rule"), "{}", e.message);
        assert_eq!(err(&with("/triggers/0/on", json!(1))).field, "code.triggers[0].on");
        assert_eq!(err(&with("/triggers/0", json!([]))).field, "code.triggers[0]");
    }

    #[test]
    fn every_statement_form_parses() {
        let code = body(json!([
            {"Let": ["x", 1]},
            {"Set": ["total", {"Var": "x"}]},
            {"If": [true, [{"Let": ["y", 2]}, {"Return": {"Var": "y"}}], [{"Return": "no"}]]},
            {"Return": {"Var": "x"}}
        ]));
        let contract = parse_contract(&code).unwrap();
        let rule = &contract.rules[0];
        assert_eq!(rule.body.len(), 4);
        // a, b, x, y.
        assert_eq!(rule.n_slots, 4);
        assert!(matches!(rule.body[0], Stmt::Let { slot: 2, .. }));
        assert!(matches!(rule.body[1], Stmt::Set { state: 3, expr: Expr::Local(2) }));
        assert!(matches!(rule.body[2], Stmt::If { .. }));
        assert!(matches!(rule.body[3], Stmt::Return(Expr::Local(2))));
    }

    #[test]
    fn every_expression_form_parses() {
        let mut exprs = vec![json!(1), json!(-2.5), json!("s"), json!(true), json!({"Var": "a"})];
        exprs.push(json!({"Not": false}));
        for op in BinOp::ALL {
            exprs.push(json!({ op.name(): [1, 2] }));
        }
        let stmts: Vec<Json> = exprs.iter().map(|e| json!({"Let": ["v", e]})).collect();
        let contract = parse_contract(&body(Json::Array(stmts))).unwrap();
        let lets: Vec<&Expr> = contract.rules[0]
            .body
            .iter()
            .map(|s| match s {
                Stmt::Let { expr, .. } => expr,
                other => panic!("not a Let: {other:?}"),
            })
            .collect();
        assert!(matches!(lets[0], Expr::Literal(Value::Int(1))));
        assert!(matches!(lets[1], Expr::Literal(Value::Float(f)) if *f == -2.5));
        assert!(matches!(lets[2], Expr::Literal(Value::Str(s)) if &**s == "s"));
        assert!(matches!(lets[3], Expr::Literal(Value::Bool(true))));
        assert!(matches!(lets[4], Expr::Local(0)));
        assert!(matches!(lets[5], Expr::Not(_)));
        for (expr, op) in lets[6..].iter().zip(BinOp::ALL) {
            assert!(matches!(expr, Expr::Binary(o, _, _) if *o == op), "{op:?}");
        }
    }

    #[test]
    fn malformed_statements_carry_their_path() {
        let cases = [
            (json!([{"Let": ["x"]}]), "code.rules[0].body[0].Let"),
            (json!([{"Let": [1, 2]}]), "code.rules[0].body[0].Let[0]"),
            (json!([{"Let": ["x", null]}]), "code.rules[0].body[0].Let[1]"),
            (json!([{"Set": ["nope", 1]}]), "code.rules[0].body[0].Set[0]"),
            (json!([{"Set": ["total", [1]]}]), "code.rules[0].body[0].Set[1]"),
            (
                json!([{"Let": ["x", 1]}, {"If": [true, [], [{"Return": {"Foo": 1}}]]}]),
                "code.rules[0].body[1].If[2][0].Return.Foo",
            ),
            (json!([{"If": [true, {}, []]}]), "code.rules[0].body[0].If[1]"),
            (json!([{"If": [true, []]}]), "code.rules[0].body[0].If"),
            (json!([{"Loop": []}]), "code.rules[0].body[0].Loop"),
            (json!([{"Let": ["x", 1], "Set": ["total", 1]}]), "code.rules[0].body[0]"),
            (json!(["Return"]), "code.rules[0].body[0]"),
            (json!([{"Return": {"Add": [1, {"Sub": [2]}]}}]), "code.rules[0].body[0].Return.Add[1].Sub"),
            (json!([{"Return": {"Not": [true]}}]), "code.rules[0].body[0].Return.Not"),
            (json!([{"Return": {"Var": 3}}]), "code.rules[0].body[0].Return.Var"),
        ];
        for (stmts, path) in cases {
            let e = err(&body(stmts.clone()));
            assert_eq!(e.field, path, "{stmts}: {}", e.message);
        }
    }

    #[test]
    fn null_arrays_and_unknown_objects_are_not_expressions() {
        for bad in [json!(null), json!([1]), json!({}), json!({"Pow": [1, 2]}), json!({"Var": "a", "Not": true})] {
            let e = err(&body(json!([{"Return": bad}])));
            assert_eq!(e.field.split(".Return").next(), Some("code.rules[0].body[0]"));
            assert!(e.message.contains("an expression is"), "{}", e.message);
        }
    }

    #[test]
    fn variables_resolve_locals_then_params_then_state() {
        // `total` is a state variable until a Let shadows it; `a` is a parameter until then.
        let code = body(json!([
            {"Let": ["r0", {"Var": "total"}]},
            {"Let": ["total", {"Var": "a"}]},
            {"Let": ["a", {"Var": "total"}]},
            {"Return": {"Var": "a"}}
        ]));
        let contract = parse_contract(&code).unwrap();
        let body = &contract.rules[0].body;
        assert!(matches!(body[0], Stmt::Let { slot: 2, expr: Expr::State(3) }));
        assert!(matches!(body[1], Stmt::Let { slot: 3, expr: Expr::Local(0) }));
        assert!(matches!(body[2], Stmt::Let { slot: 4, expr: Expr::Local(3) }));
        assert!(matches!(body[3], Stmt::Return(Expr::Local(4))));
    }

    #[test]
    fn let_bindings_end_with_their_branch() {
        let code = body(json!([
            {"If": [true, [{"Let": ["inner", 1]}], []]},
            {"Return": {"Var": "inner"}}
        ]));
        let e = err(&code);
        assert_eq!(e.field, "code.rules[0].body[1].Return.Var");
        assert!(e.message.starts_with("unknown variable \"inner\""), "{}", e.message);
        // A binding inside the else branch is not visible in a later statement of the same
        // branch's sibling, but is within its own branch.
        let code = body(json!([
            {"If": [true, [], [{"Let": ["inner", 1]}, {"Return": {"Var": "inner"}}]]}
        ]));
        assert!(parse_contract(&code).is_ok());
        // A requires expression sees parameters and state but no body local.
        let code = with("/rules/0/requires", json!([{"Var": "later"}]));
        assert_eq!(err(&code).field, "code.rules[0].requires[0].Var");
    }

    #[test]
    fn locals_do_not_leak_between_rules() {
        let code = with("/rules/1/body", json!([{"Return": {"Var": "a"}}]));
        assert_eq!(err(&code).field, "code.rules[1].body[0].Return.Var");
    }

    #[test]
    fn string_literals_are_capped() {
        let long = "z".repeat(super::super::MAX_STRING_BYTES + 1);
        let e = err(&body(json!([{"Return": long}])));
        assert_eq!(e.field, "code.rules[0].body[0].Return");
    }

    fn nested_not(levels: usize) -> Json {
        let mut expr = json!(true);
        for _ in 0..levels {
            expr = json!({ "Not": expr });
        }
        expr
    }

    fn nested_if(levels: usize) -> Json {
        let mut stmts = json!([{"Return": 1}]);
        for _ in 0..levels {
            stmts = json!([{"If": [true, stmts, []]}]);
        }
        stmts
    }

    #[test]
    fn nesting_is_bounded_at_max_depth() {
        // Return at depth 1 holds expressions at depths 2..=MAX_DEPTH: MAX_DEPTH - 2 Nots
        // around a literal reach exactly MAX_DEPTH.
        assert!(parse_contract(&body(json!([{"Return": nested_not(MAX_DEPTH - 2)}]))).is_ok());
        let e = err(&body(json!([{"Return": nested_not(MAX_DEPTH - 1)}])));
        assert!(e.message.contains("deeper than 32 levels"), "{}", e.message);
        assert!(e.field.starts_with("code.rules[0].body[0].Return.Not.Not"));
        // If statements at depths 1..=levels, the Return at levels + 1 and its literal one more.
        assert!(parse_contract(&body(nested_if(MAX_DEPTH - 2))).is_ok());
        let e = err(&body(nested_if(MAX_DEPTH - 1)));
        assert!(e.message.contains("deeper than 32 levels"), "{}", e.message);
        let e = err(&with("/rules/0/requires", json!([nested_not(MAX_DEPTH)])));
        assert!(e.message.contains("deeper than 32 levels"), "{}", e.message);
    }

    #[test]
    fn far_too_deep_json_is_an_error_not_a_crash() {
        let code = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(err(&code).field, "code");
        let deep = format!("{}true{}", "{\"Not\":".repeat(5_000), "}".repeat(5_000));
        let code = body(json!([{"Return": 0}])).replace("{\"Return\":0}", &format!("{{\"Return\":{deep}}}"));
        assert_eq!(err(&code).field, "code");
    }

    #[test]
    fn unknown_keys_of_objects_are_ignored() {
        let mut extra = base();
        extra["rules"][0].as_object_mut().unwrap().insert("comment".to_owned(), json!("ignored"));
        assert!(parse_contract(&extra.to_string()).is_ok());
        let code = adding("version", json!(2));
        assert!(parse_contract(&code).is_ok());
    }
}
