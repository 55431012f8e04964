//! CCL, the cooperative contract language of compute tasks: parsing of the JSON-serialised
//! contract structure and its deterministic, fuel-metered execution.
//!
//! [`parse_contract`] turns a task's `code` string into a validated [`Contract`], resolving every
//! variable at parse time; [`run`] executes one rule of it against the task's `inputs` under a
//! fuel limit and returns a [`RunResult`] whose outcome, output, error and fuel are a pure
//! function of its arguments. `docs/CCL.md` is the language reference.
//!
//! This module deliberately knows nothing of tasks, executors, signatures, storage or HTTP, and
//! it does not accept contract source text (`contract Foo { … }`): there is no grammar for it
//! here, only the serialised structure. Triggers are validated and kept, but nothing here acts on
//! them. There are no loops and no calls between rules, so every run terminates; fuel bounds how
//! much work one may do.

use std::collections::BTreeMap;
use std::fmt;

use gateway_core::{Currency, Did};

mod ast;
mod interp;
mod parse;
#[cfg(test)]
mod proptests;
mod value;

/// The longest `code` string accepted, in bytes. A contract is a few kilobytes; the cap bounds
/// the memory and time spent parsing a hostile one.
pub const MAX_CODE_BYTES: usize = 256 * 1024;

/// The deepest nesting of statements and expressions accepted. A statement of a rule body or a
/// `requires` expression is at depth 1, and each statement of an `If` branch, each expression of
/// a statement and each operand is one deeper than what contains it. The interpreter recurses
/// over this structure, so the bound is what keeps a hostile contract from exhausting the stack;
/// it is also low enough that serde_json's own nesting limit is never reached first by a
/// contract that is only too deep by a few levels, so the error names the depth.
pub const MAX_DEPTH: usize = 32;

/// The longest string value, in bytes, whether written in the code, given as an input, or built
/// by `Add` at run time. It bounds the memory of any single value, and with it the time one
/// concatenation or comparison can take between two fuel checks.
pub const MAX_STRING_BYTES: usize = 64 * 1024;

/// The most string bytes one run may build with `Add`, all concatenations together. Fuel alone
/// would not bound memory: every `Let` keeps its value alive until the run ends, so a contract
/// could otherwise hold thousands of maximal strings at once.
pub const MAX_BUILT_STRING_BYTES: usize = 1024 * 1024;

/// The largest output a run may produce, measured before it is built (strings by their length
/// plus quotes, numbers as 24 bytes, state documents by their serialised length). Copying a value
/// costs one unit of fuel whatever its size, so without this bound a few thousand cheap `Set`
/// statements could make the output of one run hundreds of megabytes.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// How many bytes of string data one extra unit of fuel pays for, when `Add` concatenates two
/// strings or a comparison inspects two strings. This keeps the charge proportional to the work.
pub const STRING_BYTES_PER_FUEL: usize = 64;

/// A parsed and validated CCL contract, ready to [`run`] any number of times.
///
/// Parsing resolved every variable reference to a parameter, a `Let` local or a state variable,
/// and checked every `Set` target, so running never looks a name up.
#[derive(Debug, Clone)]
pub struct Contract {
    name: String,
    participants: Vec<Did>,
    currency: Currency,
    /// State variable names in sorted order; index `i` is the variable `ast::Expr::State(i)`
    /// reads, and the order in which they appear in the output.
    state_names: Vec<String>,
    /// The initial value of each state variable, aligned with `state_names`.
    state_initial: Vec<value::Value>,
    rules: Vec<ast::Rule>,
    triggers: Vec<ast::Trigger>,
}

impl Contract {
    /// The contract's `name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The names of the rules, in the order the contract lists them (the first is the one run
    /// when the inputs name none).
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|rule| rule.name.as_str())
    }

    /// The `participants`, each a syntactically valid DID.
    pub fn participants(&self) -> &[Did] {
        &self.participants
    }

    /// The contract's `currency`.
    pub fn currency(&self) -> &Currency {
        &self.currency
    }

    /// The `triggers` as `(rule, on)` pairs, in the contract's order. Each `rule` names one of
    /// [`Contract::rule_names`]; what an `on` event is, is for the scheduler to decide.
    pub fn triggers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.triggers.iter().map(|trigger| (trigger.rule.as_str(), trigger.on.as_str()))
    }
}

/// Why a `code` string is not an acceptable contract.
///
/// `field` is the path of the offending part, always starting with `code` (for example
/// `code.rules[0].body[2].If[1][0]`), so that the HTTP layer can report it as a field error of
/// the submit request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CclError {
    /// The path of the offending part of the structure, starting with `code`.
    pub field: String,
    /// What is wrong with it, as a full sentence fragment for a person to read.
    pub message: String,
}

/// Parses and validates the JSON-serialised contract structure held in `code`.
///
/// Everything that can be checked without inputs is checked here, so a contract that parses can
/// only fail at run time on data: types, arithmetic, `requires`, missing inputs and limits.
pub fn parse_contract(code: &str) -> Result<Contract, CclError> {
    parse::parse_contract(code)
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The rule ran to a `Return` or to the end of its body.
    Success,
    /// The rule stopped on an error: a false `requires`, a type error, an arithmetic error, a
    /// limit, an unknown rule or a missing input.
    Failed,
    /// The next step would have used more fuel than the limit allowed.
    OutOfFuel,
}

impl Outcome {
    /// The outcome as the task record spells it: `success`, `failed` or `out_of_fuel`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failed => "failed",
            Outcome::OutOfFuel => "out_of_fuel",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one run, shaped like the task record's `result`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// How the run ended.
    pub outcome: Outcome,
    /// On success, `{"value": <returned value or null>, "state": {<state variables after the
    /// run>}}`; otherwise `None`.
    pub output: Option<serde_json::Value>,
    /// Otherwise, what went wrong and where, as `<path>: <message>`; on success `None`.
    pub error: Option<String>,
    /// Fuel consumed. Never above the limit; a run that ran out of fuel reports the whole limit.
    pub fuel_used: u64,
}

/// Runs one rule of `contract`: the rule named by `inputs["rule"]` if present, else the first.
///
/// Each parameter of the rule is bound from the input of the same name (numeric strings become
/// numbers, see `docs/CCL.md`); then the `requires` expressions are checked in order and the
/// body runs. Every statement and expression node costs fuel, charged before it runs; the run
/// stops with [`Outcome::OutOfFuel`] when a charge would exceed `fuel_limit`. The result depends
/// on nothing but the arguments, and the function never panics.
pub fn run(contract: &Contract, inputs: &BTreeMap<String, String>, fuel_limit: u64) -> RunResult {
    interp::run(contract, inputs, fuel_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of `docs/CCL.md`. If this test changes, the document must too.
    const WORKED_EXAMPLE: &str = r#"{
  "name": "shared_kitchen",
  "participants": ["did:key:z6MkAlice", "did:key:z6MkBob"],
  "currency": "hours",
  "state_vars": {"total_hours": 0, "sessions": 0, "last_cook": ""},
  "rules": [
    {
      "name": "log_session",
      "params": ["cook", "hours"],
      "requires": [{"Gt": [{"Var": "hours"}, 0]}, {"Le": [{"Var": "hours"}, 8]}],
      "body": [
        {"Let": ["credited", {"Mul": [{"Var": "hours"}, 2]}]},
        {"If": [{"Ge": [{"Var": "hours"}, 4]},
                [{"Set": ["total_hours", {"Add": [{"Var": "total_hours"}, {"Var": "credited"}]}]}],
                [{"Set": ["total_hours", {"Add": [{"Var": "total_hours"}, {"Var": "hours"}]}]}]]},
        {"Set": ["sessions", {"Add": [{"Var": "sessions"}, 1]}]},
        {"Set": ["last_cook", {"Var": "cook"}]},
        {"Return": {"Add": ["logged for ", {"Var": "cook"}]}}
      ]
    }
  ],
  "triggers": [{"rule": "log_session", "on": "session_finished"}]
}"#;

    fn inputs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn worked_example_of_the_documentation() {
        let contract = parse_contract(WORKED_EXAMPLE).unwrap();
        assert_eq!(contract.name(), "shared_kitchen");
        assert_eq!(contract.rule_names().collect::<Vec<_>>(), ["log_session"]);
        assert_eq!(contract.currency().as_str(), "hours");
        assert_eq!(contract.participants().len(), 2);
        assert_eq!(contract.triggers().collect::<Vec<_>>(), [("log_session", "session_finished")]);
        let result = run(&contract, &inputs(&[("cook", "did:key:z6MkAlice"), ("hours", "5")]), 1_000);
        assert_eq!(
            result,
            RunResult {
                outcome: Outcome::Success,
                output: Some(serde_json::json!({
                    "value": "logged for did:key:z6MkAlice",
                    "state": {"last_cook": "did:key:z6MkAlice", "sessions": 1, "total_hours": 10}
                })),
                error: None,
                fuel_used: 31,
            }
        );
        // The same run with too little fuel, and with a failing requirement.
        let starved = run(&contract, &inputs(&[("cook", "did:key:z6MkAlice"), ("hours", "5")]), 30);
        assert_eq!(starved.outcome, Outcome::OutOfFuel);
        assert_eq!(starved.fuel_used, 30);
        assert_eq!(
            starved.error.as_deref(),
            Some("code.rules[0].body[4].Return.Add[1]: out of fuel: this step would exceed the limit of 30 units")
        );
        let too_long = run(&contract, &inputs(&[("cook", "did:key:z6MkBob"), ("hours", "9")]), 1_000);
        assert_eq!(too_long.outcome, Outcome::Failed);
        assert_eq!(too_long.error.as_deref(), Some("code.rules[0].requires[1]: the requirement is false"));
        assert_eq!(too_long.fuel_used, 9);
    }

    #[test]
    fn outcome_spellings_match_the_task_record() {
        assert_eq!(Outcome::Success.as_str(), "success");
        assert_eq!(Outcome::Failed.as_str(), "failed");
        assert_eq!(Outcome::OutOfFuel.as_str(), "out_of_fuel");
        assert_eq!(Outcome::OutOfFuel.to_string(), "out_of_fuel");
    }

    #[test]
    fn ccl_error_displays_path_then_message() {
        let error = CclError { field: "code.rules[0].name".to_owned(), message: "must be a string".to_owned() };
        assert_eq!(error.to_string(), "code.rules[0].name: must be a string");
        let as_std: &dyn std::error::Error = &error;
        assert!(as_std.source().is_none());
    }

    #[test]
    fn contracts_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Contract>();
        assert_send_sync::<RunResult>();
    }
}
