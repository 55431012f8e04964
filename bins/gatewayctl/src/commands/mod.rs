//! What each command does, one module per area, around a shared [`Context`]: the global
//! options, the key, the cached token and the SDK client built from them.
//!
//! Commands print through [`Output`] and return errors for `main` to explain; none of them
//! exits the process itself. The cached token is written back after every command, so a token
//! the SDK renewed on the way is not lost.

mod compute;
mod coop;
mod export;
mod governance;
mod key;
mod ledger;
mod log;
mod login;
mod notifications;
mod trust;
mod verify_request;
mod watch;

pub(crate) use governance::{EXIT_INVALID_RECEIPT, InvalidReceipt};
pub(crate) use log::LogInvalid;

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use gateway_client::{Client, Credentials, Identity, Session};
use gateway_core::{CoopId, Scope};

use crate::cli::{Cli, Command};
use crate::files::{self, TokenCache};
use crate::output::Output;

/// The global options and what is derived from them.
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) gateway: String,
    pub(crate) key_path: PathBuf,
    pub(crate) coop: Option<String>,
    /// Where `coop` came from, so that messages name the setting actually in effect.
    pub(crate) coop_source: Option<CoopSource>,
    pub(crate) out: Output,
}

/// Where the cooperative of a command came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoopSource {
    /// The `--coop` option.
    Flag,
    /// The `GATEWAYCTL_COOP` variable.
    Variable,
}

impl CoopSource {
    /// The source of a cooperative clap has parsed: `--coop` has no default, so a value that is
    /// not on the command line came from `GATEWAYCTL_COOP`.
    fn of(coop: Option<&str>) -> Option<CoopSource> {
        coop?;
        let flag = std::env::args_os()
            .skip(1)
            .any(|arg| arg.to_str().is_some_and(|arg| arg == "--coop" || arg.starts_with("--coop=")));
        Some(if flag { CoopSource::Flag } else { CoopSource::Variable })
    }
}

/// The message of a command that needs a login when there is none, naming the cooperative
/// setting in effect (`--coop` or `GATEWAYCTL_COOP`), if any.
pub(crate) fn not_logged_in(coop: Option<(&str, CoopSource)>) -> String {
    match coop {
        None => "not logged in: run `gatewayctl --coop <id> login` first (or set GATEWAYCTL_COOP=<id> and run `gatewayctl login`)".into(),
        Some((coop, CoopSource::Flag)) => format!("not logged in: run `gatewayctl --coop {coop} login` first"),
        Some((coop, CoopSource::Variable)) => {
            format!("not logged in: run `gatewayctl login` first (for cooperative '{coop}', from GATEWAYCTL_COOP)")
        }
    }
}

/// An authenticated client with what the command needs to know about its login.
#[derive(Debug)]
pub(crate) struct LoggedIn {
    pub(crate) client: Client,
    pub(crate) identity: Identity,
    pub(crate) coop: Option<CoopId>,
}

impl Context {
    pub(crate) fn new(cli: &Cli) -> anyhow::Result<Self> {
        let key_path = match &cli.key {
            Some(path) => path.clone(),
            None => files::default_key_path()?,
        };
        Ok(Self {
            gateway: cli.gateway.clone(),
            key_path,
            coop: cli.coop.clone(),
            coop_source: CoopSource::of(cli.coop.as_deref()),
            out: Output { json: cli.json },
        })
    }

    /// The cooperative setting in effect and where it came from.
    fn coop_setting(&self) -> Option<(&str, CoopSource)> {
        self.coop.as_deref().zip(self.coop_source)
    }

    pub(crate) fn token_path(&self) -> PathBuf {
        files::token_path(&self.key_path)
    }

    /// A client for public routes.
    pub(crate) fn public_client(&self) -> anyhow::Result<Client> {
        Ok(Client::builder(&self.gateway).user_agent(concat!("gatewayctl/", env!("CARGO_PKG_VERSION"))).build()?)
    }

    /// The `--coop` option, parsed.
    pub(crate) fn coop_option(&self) -> anyhow::Result<Option<CoopId>> {
        self.coop
            .as_deref()
            .map(|c| CoopId::parse(c).map_err(|why| anyhow::anyhow!("invalid --coop '{c}': {why}")))
            .transpose()
    }

    /// A client logged in from the cache, renewing the token with the key when it nears
    /// expiry (with the coop and scopes of the cached login).
    pub(crate) async fn session(&self) -> anyhow::Result<LoggedIn> {
        let identity = files::read_key(&self.key_path)?;
        let Some(cache) = files::read_token(&self.token_path())? else {
            bail!(not_logged_in(self.coop_setting()));
        };
        if cache.gateway != self.gateway {
            bail!(
                "the cached login is for {}, not {}: run `gatewayctl --gateway {} login`",
                cache.gateway,
                self.gateway,
                self.gateway
            );
        }
        if cache.session.did != identity.did().as_str() {
            bail!("the cached login belongs to another key: run `gatewayctl login`");
        }
        let cached_coop = cache.session.coop_id.as_deref().map(CoopId::parse).transpose().ok().flatten();
        let coop = match self.coop_option()? {
            Some(coop) if Some(&coop) != cached_coop.as_ref() => bail!(
                "you are logged in for {}, not {coop}{}: run `{}`",
                cached_coop.map(|c| c.to_string()).unwrap_or_else(|| "no cooperative".into()),
                match self.coop_source {
                    Some(CoopSource::Variable) => " (from GATEWAYCTL_COOP)",
                    _ => "",
                },
                match self.coop_source {
                    Some(CoopSource::Variable) => "gatewayctl login".to_owned(),
                    _ => format!("gatewayctl --coop {coop} login"),
                }
            ),
            _ => cached_coop,
        };
        let client = self.public_client()?;
        let scopes: Vec<Scope> = cache.session.scopes.iter().filter_map(|s| Scope::parse(s)).collect();
        client.set_credentials(Credentials { identity: identity.clone(), coop_id: coop.clone(), scopes }).await;
        client.set_session(cache.session).await;
        Ok(LoggedIn { client, identity, coop })
    }

    /// Writes the client's (possibly renewed) session to the cache.
    pub(crate) async fn save(&self, client: &Client) -> anyhow::Result<()> {
        if let Some(session) = client.session().await {
            self.save_session(session)?;
        }
        Ok(())
    }

    pub(crate) fn save_session(&self, session: Session) -> anyhow::Result<()> {
        files::write_token(&self.token_path(), &TokenCache { gateway: self.gateway.clone(), session })
    }
}

impl LoggedIn {
    /// The coop of the login (commands on a cooperative need one).
    pub(crate) fn coop(&self) -> anyhow::Result<&CoopId> {
        self.coop.as_ref().context("this login has no cooperative: run `gatewayctl --coop <id> login`")
    }
}

/// Runs a command.
pub(crate) async fn run(cli: Cli) -> anyhow::Result<()> {
    let context = Context::new(&cli)?;
    match cli.command {
        Command::Key(command) => key::run(&context, command),
        Command::Login(args) => login::run(&context, args).await,
        // Receipts need no login: the signing keys are public, or come from a file.
        Command::Receipt(command) => governance::receipt(&context, command).await,
        // Neither does request evidence: the key is the signer's DID.
        Command::VerifyRequest { file } => verify_request::run(file.as_deref()),
        // `log verify` and `log policy` need no login; the others log in themselves.
        Command::Log(command) => log::run(&context, command).await,
        command => {
            let session = context.session().await?;
            let result = dispatch(&context, &session, command).await;
            // Keep a renewed token even when the command itself failed.
            context.save(&session.client).await?;
            result
        }
    }
}

async fn dispatch(context: &Context, session: &LoggedIn, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Coop(command) => coop::run(context, session, command).await,
        Command::Pay(args) => ledger::pay(context, session, args).await,
        Command::Balance(args) => ledger::balance(context, session, args).await,
        Command::History(args) => ledger::history(context, session, args).await,
        Command::Export(args) => export::run(context, session, args).await,
        Command::Trust(command) => trust::run(context, session, command).await,
        Command::Domain(command) => governance::domain(context, session, command).await,
        Command::Proposal(command) => governance::proposal(context, session, command).await,
        Command::Compute(command) => compute::run(context, session, command).await,
        Command::Watch(args) => watch::run(context, session, args).await,
        Command::Notifications(args) => notifications::run(context, session, args).await,
        Command::Key(_) | Command::Login(_) | Command::Receipt(_) | Command::VerifyRequest { .. } | Command::Log(_) => {
            unreachable!("handled before logging in")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_logged_in_names_the_cooperative_setting_in_effect() {
        assert_eq!(
            not_logged_in(None),
            "not logged in: run `gatewayctl --coop <id> login` first (or set GATEWAYCTL_COOP=<id> and run `gatewayctl login`)"
        );
        assert_eq!(
            not_logged_in(Some(("bakery", CoopSource::Flag))),
            "not logged in: run `gatewayctl --coop bakery login` first"
        );
        let from_variable = not_logged_in(Some(("bakery", CoopSource::Variable)));
        assert_eq!(
            from_variable,
            "not logged in: run `gatewayctl login` first (for cooperative 'bakery', from GATEWAYCTL_COOP)"
        );
        assert!(!from_variable.contains("--coop"), "{from_variable}");
    }
}
