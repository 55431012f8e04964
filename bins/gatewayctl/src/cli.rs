//! The command line's grammar (clap derive): global options, commands and their arguments.
//!
//! Parsing only: values are checked here as far as the type says (a DID, an amount, a score in
//! `0..=1`), so mistakes are reported before any network call. What each command does is in
//! `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use gateway_core::{Amount, Did};

/// The command line of a cooperative member: keys, login, payments, trust, governance,
/// compute and the live event stream of a cooperative gateway.
#[derive(Debug, Parser)]
#[command(name = "gatewayctl", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// The gateway's base URL.
    #[arg(long, env = "GATEWAYCTL_URL", default_value = "http://127.0.0.1:8080", global = true)]
    pub(crate) gateway: String,
    /// The key file [default: $XDG_CONFIG_HOME/gatewayctl/key.json or ~/.config/gatewayctl/key.json].
    #[arg(long, env = "GATEWAYCTL_KEY", global = true)]
    pub(crate) key: Option<PathBuf>,
    /// The cooperative [default: the one of the cached login].
    #[arg(long, env = "GATEWAYCTL_COOP", global = true)]
    pub(crate) coop: Option<String>,
    /// Machine-readable JSON output (one document, or one line per event for `watch`).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or show the member's Ed25519 key.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Log in (challenge, signature, token) and cache the token beside the key.
    Login(LoginArgs),
    /// Cooperatives and their members.
    #[command(subcommand)]
    Coop(CoopCommand),
    /// Pay another member.
    Pay(PayArgs),
    /// A balance (your own by default).
    Balance(BalanceArgs),
    /// The cooperative's transactions, newest first.
    History(HistoryArgs),
    /// The treasurer's export: the coop's books as Beancount, hledger or CSV, written to a file
    /// (admins: the coop or any account; members: their own, with --member <your DID>).
    Export(ExportArgs),
    /// Trust scores and your trust edges.
    #[command(subcommand)]
    Trust(TrustCommand),
    /// Governance domains.
    #[command(subcommand)]
    Domain(DomainCommand),
    /// Governance proposals: create, open, vote, close, list, show, verify.
    #[command(subcommand)]
    Proposal(ProposalCommand),
    /// Decision receipts: offline verification, the gateway's signing keys.
    #[command(subcommand)]
    Receipt(ReceiptCommand),
    /// Compute tasks.
    #[command(subcommand)]
    Compute(ComputeCommand),
    /// Follow the cooperative's event stream live (Ctrl-C to stop).
    Watch(WatchArgs),
    /// Your notifications.
    Notifications(NotificationsArgs),
    /// The coop's tamper-evident log: prove an event, verify a proof offline, audit the coop.
    #[command(subcommand, long_about = LOG_ABOUT)]
    Log(LogCommand),
    /// Verify a signed request's evidence offline: the `request_signature` of a history item,
    /// a voter's entry, or the evidence object itself; checks that the record's fields are the
    /// signed body's and prints the signer; exits 1 on any difference. Needs no gateway.
    VerifyRequest {
        /// A JSON file holding the evidence or a record that carries it [default: standard input].
        file: Option<PathBuf>,
    },
}

/// `key …`.
#[derive(Debug, Subcommand)]
pub(crate) enum KeyCommand {
    /// Write a new key file (readable by you only); refuses to overwrite an existing one.
    Generate,
    /// Show the key's DIDs and public key.
    Show {
        /// Print only the `did:key` DID, for scripts: `ALICE=$(gatewayctl key show --did)`.
        #[arg(long)]
        did: bool,
    },
}

/// `login`.
#[derive(Debug, Args)]
pub(crate) struct LoginArgs {
    /// Scopes to ask for, comma-separated; `member` (the default) is every scope a member's
    /// role allows, `all` adds `coop:write` and `oracle:write` (admins), `bootstrap` is
    /// `coop:read,coop:write` (to create a new cooperative).
    #[arg(long, value_delimiter = ',', default_value = "member")]
    pub(crate) scopes: Vec<String>,
    /// An identity-only token (no cooperative, no scopes).
    #[arg(long, conflicts_with = "scopes")]
    pub(crate) identity_only: bool,
}

/// `coop …`.
#[derive(Debug, Subcommand)]
pub(crate) enum CoopCommand {
    /// Create the cooperative (log in with `--scopes bootstrap` first); you become its admin.
    Create {
        /// Its id [default: --coop].
        id: Option<String>,
        /// Display name.
        #[arg(long)]
        name: String,
        /// Kind.
        #[arg(long = "type", default_value = "worker")]
        coop_type: String,
        /// Free text.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Details and settings.
    Show {
        /// The cooperative [default: --coop].
        id: Option<String>,
    },
    /// The members.
    Members(PageArgs),
    /// Add a member (admins).
    AddMember {
        /// The member's DID.
        did: Did,
        /// `member` or `admin`.
        #[arg(long, default_value = "member", value_parser = ["member", "admin"])]
        role: String,
    },
    /// Remove a member (admins; not the last admin).
    RemoveMember {
        /// The member's DID.
        did: Did,
    },
    /// Change a member's role (admins).
    SetRole {
        /// The member's DID.
        did: Did,
        /// `member` or `admin`.
        #[arg(value_parser = ["member", "admin"])]
        role: String,
    },
}

/// `--limit`/`--offset`.
#[derive(Debug, Args)]
pub(crate) struct PageArgs {
    /// Page size (at most 100).
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
    /// Items to skip.
    #[arg(long, default_value_t = 0)]
    pub(crate) offset: u64,
}

/// `pay`.
#[derive(Debug, Args)]
pub(crate) struct PayArgs {
    /// The payee's DID.
    pub(crate) to: Did,
    /// The amount (at most 6 decimals).
    #[arg(value_parser = parse_amount)]
    pub(crate) amount: Amount,
    /// The currency [default: the cooperative's].
    #[arg(long)]
    pub(crate) currency: Option<String>,
    /// Free text.
    #[arg(long)]
    pub(crate) memo: Option<String>,
    /// Makes the payment safe to repeat: the same key and payment within 24 h is paid once.
    #[arg(long)]
    pub(crate) idempotency_key: Option<String>,
}

/// `balance`.
#[derive(Debug, Args)]
pub(crate) struct BalanceArgs {
    /// The account [default: yours]; a DID or a system account (`coop:<id>:treasury`).
    pub(crate) account: Option<String>,
    /// The currency to report [default: the cooperative's].
    #[arg(long)]
    pub(crate) currency: Option<String>,
}

/// `history`.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Page size (at most 100).
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: u32,
    /// Items to skip.
    #[arg(long, default_value_t = 0)]
    pub(crate) offset: u64,
    /// Only transactions from or to this account.
    #[arg(long)]
    pub(crate) account: Option<String>,
    /// Only this currency.
    #[arg(long)]
    pub(crate) currency: Option<String>,
}

/// `export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// `beancount` (passes bean-check), `hledger` (passes hledger check) or `csv`.
    #[arg(long, value_parser = ["beancount", "hledger", "csv"])]
    pub(crate) format: String,
    /// The period's first day, YYYY-MM-DD (UTC, inclusive) [default: the log's beginning].
    #[arg(long, value_parser = parse_day)]
    pub(crate) from: Option<String>,
    /// The day after the period, YYYY-MM-DD (UTC, exclusive) [default: now].
    #[arg(long, value_parser = parse_day)]
    pub(crate) to: Option<String>,
    /// Only this account: a member's DID (members: their own) or the coop's treasury or
    /// exchange account.
    #[arg(long)]
    pub(crate) member: Option<String>,
    /// The file to write; it appears only once the export is complete (written beside it
    /// first, as `<file>.partial`, then renamed).
    #[arg(long, short)]
    pub(crate) output: PathBuf,
}

/// `trust …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TrustCommand {
    /// A DID's score and class.
    Score {
        /// The DID.
        did: Did,
    },
    /// Set or replace your trust in a DID.
    Set {
        /// The DID.
        did: Did,
        /// 0 to 1.
        #[arg(value_parser = parse_score)]
        score: f64,
    },
    /// Revoke your trust edge to a DID.
    Revoke {
        /// The DID.
        did: Did,
    },
    /// A DID's outgoing and incoming edges.
    Edges {
        /// The DID.
        did: Did,
        #[command(flatten)]
        page: PageArgs,
    },
}

/// `domain …`.
#[derive(Debug, Subcommand)]
pub(crate) enum DomainCommand {
    /// Create a governance domain.
    Create {
        /// Its id.
        id: String,
        /// Display name [default: the id].
        #[arg(long)]
        name: Option<String>,
        /// A voter (repeat for each).
        #[arg(long = "member", required = true)]
        members: Vec<Did>,
        /// Quorum, percent.
        #[arg(long)]
        quorum: Option<u32>,
        /// `majority`, `supermajority:<pct>` or `unanimous`.
        #[arg(long)]
        rule: Option<String>,
    },
    /// The cooperative's domains.
    List,
}

/// `proposal …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ProposalCommand {
    /// Create a proposal (a draft unless --open).
    Create {
        /// The domain.
        #[arg(long)]
        domain: String,
        /// Title.
        #[arg(long)]
        title: String,
        /// Description (the content of a text proposal).
        #[arg(long, default_value = "")]
        description: String,
        /// A tagged payload as JSON, e.g. '{"type":"budget","to":"did:key:…","amount":50}'.
        #[arg(long)]
        payload: Option<String>,
        /// Decision rule overriding the domain's.
        #[arg(long)]
        rule: Option<String>,
        /// Voting time in seconds.
        #[arg(long)]
        duration: Option<u64>,
        /// Open it right away.
        #[arg(long)]
        open: bool,
    },
    /// Open a draft.
    Open {
        /// The proposal.
        id: String,
    },
    /// Vote: for/approve/yes, against/reject/no, abstain.
    Vote {
        /// The proposal.
        id: String,
        /// The choice.
        #[arg(value_parser = parse_choice)]
        choice: gateway_client::VoteChoice,
    },
    /// Close: tally, apply, sign a receipt.
    Close {
        /// The proposal.
        id: String,
    },
    /// The proposals.
    List {
        /// `draft`, `open`, `closed` or `active`.
        #[arg(long)]
        status: Option<String>,
        /// Only this domain.
        #[arg(long)]
        domain: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
    /// A proposal and its current tally.
    Show {
        /// The proposal.
        id: String,
    },
    /// Fetch the proposal's receipt and verify it offline.
    Verify {
        /// The proposal.
        id: String,
        /// Verify against this signing-keys file instead of the gateway's list.
        #[arg(long)]
        keys: Option<PathBuf>,
        /// Also write the receipt to this file.
        #[arg(long)]
        save: Option<PathBuf>,
    },
}

/// `receipt …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ReceiptCommand {
    /// Verify a receipt file: canonical form, decision hash, signer, Ed25519 signature, and
    /// that the key was the gateway's at the receipt's time.
    Verify {
        /// The receipt (JSON, as `proposal verify --save` or the proof route writes it).
        file: PathBuf,
        /// A signing-keys file (as `receipt keys` writes it) for fully offline use
        /// [default: fetch your coop's list from the gateway, which needs a login].
        #[arg(long)]
        keys: Option<PathBuf>,
    },
    /// Print your coop's receipt signing keys, current and retired (needs a login; save them
    /// for offline verification).
    Keys,
}

/// The long help of `log`.
const LOG_ABOUT: &str = "The coop's tamper-evident log (docs/LOG.md): every event of the coop is an entry of an \
append-only Merkle log (C2SP tlog-tiles), whose checkpoints the coop's receipt key signs.

A member proves an event and anyone checks the proof offline:
  gatewayctl --coop bakery log proof --seq 42 --wait > proof.txt
  gatewayctl --coop bakery log entry --seq 42 > entry.json
  gatewayctl --coop bakery log policy > policy.txt      (or a policy with witnesses)
  gatewayctl log verify proof.txt --entry entry.json --policy policy.txt

An auditor (a member) checks the whole history and the live balances, keeping what it verified:
  gatewayctl --coop bakery log audit --state ~/.local/state/gatewayctl/audits

Exit status: 0 verified, 1 could not check (unreadable input, gateway unreachable), 3 does not \
verify (verify) or a mismatch was found (audit).";

/// `log …`.
#[derive(Debug, Subcommand)]
pub(crate) enum LogCommand {
    /// Verify offline that an entry is in a coop's log (no gateway, no login).
    ///
    /// Checks that the proof's inclusion path leads from the entry's exact bytes to the
    /// checkpoint's root, that a log key of the policy signed the checkpoint, and that the
    /// witnesses' cosignatures meet the policy's quorum. Exit 0 with a one-line summary, 3 when
    /// it does not verify, 1 when a file cannot be read.
    Verify {
        /// The proof (`c2sp.org/tlog-proof@v1`, as `log proof` writes it).
        proof: PathBuf,
        /// The entry's exact bytes (as `log entry` writes them).
        #[arg(long)]
        entry: PathBuf,
        /// A C2SP tlog-policy: `log <vkey>` lines, optional `witness`/`group` lines, a `quorum`
        /// line (as `log policy` writes one).
        #[arg(long)]
        policy: PathBuf,
    },
    /// Audit the cooperative's whole history and its live balances (a member's login).
    ///
    /// Verifies the signed checkpoint with the log's published keys (and those seen last time),
    /// downloads every entry and hash tile and recomputes the tree, checks that the log extends
    /// the checkpoint saved last time, verifies every receipt in the log, replays the ledger
    /// from LogOpened and compares every balance (members, treasury, exchange) with the live
    /// one. Prints a summary; exit 3 on any mismatch. With --state, the verified checkpoint and
    /// keys are kept in `<dir>/<coop>.checkpoint` and `<dir>/<coop>.keys` (only after a clean
    /// audit) and the next audit holds the log to them.
    Audit {
        /// Where audits of this machine keep what they verified, one pair of files per coop.
        #[arg(long)]
        state: Option<PathBuf>,
        /// Also require the checkpoint to satisfy this tlog-policy (log key and witness quorum).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Print the proof (c2sp.org/tlog-proof@v1) of the entry of event N of your coop.
    ///
    /// `pay` prints the event of a payment; `watch` shows every event's number.
    Proof {
        /// The event's sequence number.
        #[arg(long)]
        seq: u64,
        /// Wait up to 5 s for a checkpoint covering it (and meeting the witness quorum).
        #[arg(long)]
        wait: bool,
    },
    /// Print the entry of event N of your coop, its exact bytes (no newline is added).
    Entry {
        /// The event's sequence number.
        #[arg(long)]
        seq: u64,
        /// Wait up to 5 s for a checkpoint covering it.
        #[arg(long)]
        wait: bool,
        /// Also write its proof to this file (against the same checkpoint).
        #[arg(long)]
        proof: Option<PathBuf>,
    },
    /// Print a tlog-policy for the coop's log from the keys it publishes now (no login).
    ///
    /// The policy has no witnesses (`quorum none`); add `witness` lines and name them in the
    /// quorum to require cosignatures. Trust on first use: compare the keys with another copy
    /// (another member, the coop's documents) before relying on it.
    Policy,
}

/// `compute …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ComputeCommand {
    /// Submit a CCL contract (a JSON file) and wait for its result.
    Submit {
        /// The contract file.
        file: PathBuf,
        /// An input `name=value` (repeat for each).
        #[arg(long = "input", value_parser = parse_input)]
        inputs: Vec<(String, String)>,
        /// Fuel limit.
        #[arg(long, default_value_t = 100_000)]
        fuel: u64,
        /// `low`, `normal` or `high`.
        #[arg(long)]
        priority: Option<String>,
        /// Return right after submitting.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for the result, seconds.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// A task's status and result.
    Status {
        /// The task.
        id: String,
    },
    /// The cooperative's tasks.
    List {
        /// Only this status.
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
}

/// `watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// Start after this sequence number (replays what followed it) [default: live only].
    #[arg(long)]
    pub(crate) after_seq: Option<u64>,
}

/// `notifications`.
#[derive(Debug, Args)]
pub(crate) struct NotificationsArgs {
    /// Only unread ones.
    #[arg(long)]
    pub(crate) unread: bool,
    /// Page size.
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: u32,
    /// Mark as read.
    #[command(subcommand)]
    pub(crate) action: Option<NotificationsCommand>,
}

/// `notifications read`.
#[derive(Debug, Subcommand)]
pub(crate) enum NotificationsCommand {
    /// Mark one notification (or --all) read.
    Read {
        /// The notification.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every notification.
        #[arg(long)]
        all: bool,
    },
}

fn parse_amount(text: &str) -> Result<Amount, String> {
    Amount::parse_payment(text).map_err(|e| format!("the amount {e}"))
}

fn parse_day(text: &str) -> Result<String, String> {
    gateway_domain::export::Day::parse(text)
        .map(|day| day.to_string())
        .ok_or_else(|| format!("'{text}' is not a date YYYY-MM-DD (UTC)"))
}

fn parse_score(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(score) if (0.0..=1.0).contains(&score) => Ok(score),
        _ => Err("a score is a number from 0 to 1".into()),
    }
}

fn parse_choice(text: &str) -> Result<gateway_client::VoteChoice, String> {
    gateway_client::VoteChoice::parse(text).ok_or_else(|| "choose for, against or abstain".into())
}

fn parse_input(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err("an input is name=value".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("gatewayctl").chain(args.iter().copied()))
    }

    const DID: &str = "did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX";

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_go_anywhere_and_have_defaults() {
        let cli = parse(&["balance"]).unwrap();
        assert_eq!(cli.gateway, "http://127.0.0.1:8080");
        assert!(!cli.json && cli.coop.is_none());
        let cli = parse(&["pay", DID, "2.5", "--coop", "bakery", "--json", "--gateway", "http://gw:1"]).unwrap();
        assert_eq!((cli.coop.as_deref(), cli.json, cli.gateway.as_str()), (Some("bakery"), true, "http://gw:1"));
        let Command::Pay(pay) = cli.command else { panic!() };
        assert_eq!(pay.amount, Amount::from_micros(2_500_000));
    }

    #[test]
    fn values_are_checked_before_any_request() {
        assert!(parse(&["pay", "not-a-did", "1"]).is_err());
        assert!(parse(&["pay", DID, "0"]).is_err());
        assert!(parse(&["pay", DID, "1.0000001"]).is_err());
        assert!(parse(&["trust", "set", DID, "1.5"]).is_err());
        assert!(parse(&["proposal", "vote", "p1", "maybe"]).is_err());
        assert!(parse(&["compute", "submit", "f.json", "--input", "novalue"]).is_err());
        assert!(parse(&["coop", "set-role", DID, "owner"]).is_err());
        assert!(parse(&["notifications", "read"]).is_err(), "an id or --all");
        assert!(parse(&["log", "verify", "p.txt", "--entry", "e.json"]).is_err(), "a policy is needed");
        assert!(parse(&["log", "proof"]).is_err(), "a seq is needed");
        assert!(parse(&["log", "proof", "--seq", "-1"]).is_err());
    }

    #[test]
    fn log_commands_take_the_global_coop() {
        let cli = parse(&["log", "audit", "--coop", "bakery", "--state", "/tmp/audits"]).unwrap();
        assert_eq!(cli.coop.as_deref(), Some("bakery"));
        let Command::Log(LogCommand::Audit { state, policy }) = cli.command else { panic!() };
        assert_eq!((state.as_deref(), policy), (Some(std::path::Path::new("/tmp/audits")), None));
        let cli = parse(&["log", "verify", "p.txt", "--entry", "e.json", "--policy", "policy.txt"]).unwrap();
        let Command::Log(LogCommand::Verify { proof, entry, policy }) = cli.command else { panic!() };
        assert_eq!(
            (proof.to_str(), entry.to_str(), policy.to_str()),
            (Some("p.txt"), Some("e.json"), Some("policy.txt"))
        );
        let Command::Log(LogCommand::Entry { seq, wait, proof }) =
            parse(&["log", "entry", "--seq", "7", "--wait"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!((seq, wait, proof), (7, true, None));
    }

    #[test]
    fn login_scopes_and_notification_actions() {
        let Command::Login(login) = parse(&["login", "--scopes", "ledger:read,ledger:write"]).unwrap().command else {
            panic!()
        };
        assert_eq!(login.scopes, ["ledger:read", "ledger:write"]);
        let Command::Login(login) = parse(&["login"]).unwrap().command else { panic!() };
        assert_eq!(login.scopes, ["member"]);
        let Command::Notifications(n) = parse(&["notifications", "read", "--all"]).unwrap().command else { panic!() };
        assert!(matches!(n.action, Some(NotificationsCommand::Read { all: true, id: None })));
        let Command::Notifications(n) = parse(&["notifications", "--unread"]).unwrap().command else { panic!() };
        assert!(n.unread && n.action.is_none());
        let Command::Compute(ComputeCommand::Submit { inputs, fuel, .. }) =
            parse(&["compute", "submit", "c.json", "--input", "hours=5", "--input", "rule=log"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!(inputs, [("hours".to_owned(), "5".to_owned()), ("rule".to_owned(), "log".to_owned())]);
        assert_eq!(fuel, 100_000);
    }
}
