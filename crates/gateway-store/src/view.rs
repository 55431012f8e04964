//! The balance read model of a SQLite store: what the hot balance route reads, kept in memory.
//!
//! A SQLite store has one writer, in this process, so this process sees every change to a
//! balance or a coop's default currency: the writer reports the keys a committed group touched
//! and the view forgets them before any job of that group is answered or any of its events is
//! announced. A read that misses fills the view from the database, but only if no group
//! committed while it read (an epoch, bumped at each such commit, tells), so a read that raced
//! a commit can never leave a value older than the commit behind. The store stays the truth: the
//! view holds copies, forgets everything when it grows past its bound, and is never written to
//! by anything but a read of the database.
//!
//! PostgreSQL stores have no view: other replicas write to the same database.

use std::sync::Mutex;

use gateway_core::{CoopId, Error};
use gateway_domain::ports::CoopBalances;

/// The view's maps: keyed by coop ids and account names, hashed with a randomly seeded fast
/// hash (SipHash was a visible share of a balance read).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Most accounts the view holds before it starts over (a few MB).
pub(crate) const MAX_ACCOUNTS: usize = 65_536;

/// A key a committed group changed: one account's balances, or a coop's row (its default
/// currency may have changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touched {
    /// `balances` rows of `(coop, account)`.
    Balance(CoopId, String),
    /// The `coops` row.
    Coop(CoopId),
}

#[derive(Debug, Default)]
struct CoopView {
    /// The coop's default currency, once read.
    default_currency: Option<gateway_core::Currency>,
    accounts: HashMap<String, Vec<(gateway_core::Currency, gateway_core::Amount)>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Bumped by every commit that touched a balance or a coop.
    epoch: u64,
    coops: HashMap<String, CoopView>,
    accounts: usize,
}

/// The balance read model. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct BalanceView {
    inner: Mutex<Inner>,
}

/// What [`BalanceView::get`] found.
pub(crate) enum Lookup {
    /// The account's balances and its coop's default currency.
    Hit(CoopBalances),
    /// Not in the view: read the database, then [`BalanceView::fill`] with this epoch.
    Miss(u64),
}

impl BalanceView {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The view's answer for one account of a coop.
    pub(crate) fn get(&self, coop: &CoopId, account: &str) -> Lookup {
        let inner = self.lock();
        let found = inner.coops.get(coop.as_str()).and_then(|view| {
            let currency = view.default_currency.as_ref()?;
            let balances = view.accounts.get(account)?;
            Some(CoopBalances { default_currency: currency.clone(), balances: balances.clone() })
        });
        match found {
            Some(hit) => Lookup::Hit(hit),
            None => Lookup::Miss(inner.epoch),
        }
    }

    /// Keeps what a read of the database found, unless a commit touched balances or coops
    /// since the read's [`Lookup::Miss`] (`epoch`): its copy may then be older than the commit.
    pub(crate) fn fill(&self, epoch: u64, coop: &CoopId, account: &str, read: &CoopBalances) {
        let mut inner = self.lock();
        if inner.epoch != epoch {
            return;
        }
        if inner.accounts >= MAX_ACCOUNTS {
            inner.coops.clear();
            inner.accounts = 0;
        }
        let inner = &mut *inner;
        let view = inner.coops.entry(coop.as_str().to_owned()).or_default();
        view.default_currency = Some(read.default_currency.clone());
        if view.accounts.insert(account.to_owned(), read.balances.clone()).is_none() {
            inner.accounts += 1;
        }
    }

    /// Forgets what a committed group changed. Called by the writer after the commit and
    /// before anyone is told of it.
    pub(crate) fn forget(&self, touched: &[Touched]) {
        if touched.is_empty() {
            return;
        }
        let mut inner = self.lock();
        inner.epoch += 1;
        for key in touched {
            match key {
                Touched::Balance(coop, account) => {
                    let removed = inner.coops.get_mut(coop.as_str()).and_then(|view| view.accounts.remove(account));
                    if removed.is_some() {
                        inner.accounts -= 1;
                    }
                }
                Touched::Coop(coop) => {
                    if let Some(view) = inner.coops.remove(coop.as_str()) {
                        inner.accounts -= view.accounts.len();
                    }
                }
            }
        }
    }

    /// Accounts held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().accounts
    }
}

/// Reads through the view: its answer when it has one, else `read()` (the database), kept for
/// next time when no commit raced it. The database read is only made on a miss: its future is
/// large, and a hit should not build and move it.
pub(crate) async fn read_through<R, F>(
    view: Option<&BalanceView>,
    coop: &CoopId,
    account: &str,
    read: R,
) -> Result<Option<CoopBalances>, Error>
where
    R: FnOnce() -> F,
    F: Future<Output = Result<Option<CoopBalances>, Error>>,
{
    let Some(view) = view else { return read().await };
    let epoch = match view.get(coop, account) {
        Lookup::Hit(hit) => return Ok(Some(hit)),
        Lookup::Miss(epoch) => epoch,
    };
    let found = read().await?;
    if let Some(found) = &found {
        view.fill(epoch, coop, account, found);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::{Amount, Currency};

    fn coop() -> CoopId {
        CoopId::parse("c1").unwrap()
    }

    fn read(units: i64) -> CoopBalances {
        CoopBalances {
            default_currency: Currency::parse("hours").unwrap(),
            balances: vec![(Currency::parse("hours").unwrap(), Amount::from_units(units))],
        }
    }

    fn hit(view: &BalanceView, account: &str) -> Option<CoopBalances> {
        match view.get(&coop(), account) {
            Lookup::Hit(hit) => Some(hit),
            Lookup::Miss(_) => None,
        }
    }

    fn epoch(view: &BalanceView) -> u64 {
        match view.get(&coop(), "nobody") {
            Lookup::Miss(epoch) => epoch,
            Lookup::Hit(_) => unreachable!(),
        }
    }

    #[test]
    fn a_fill_that_raced_a_commit_is_dropped() {
        let view = BalanceView::default();
        let before = epoch(&view);
        // A commit touching any key lands between the read's miss and its fill.
        view.forget(&[Touched::Balance(coop(), "someone else".into())]);
        view.fill(before, &coop(), "a", &read(1));
        assert_eq!(hit(&view, "a"), None, "a copy read before the commit must not be kept");
        view.fill(epoch(&view), &coop(), "a", &read(2));
        assert_eq!(hit(&view, "a"), Some(read(2)));
    }

    #[test]
    fn a_commit_forgets_its_keys_and_a_coop_change_its_accounts() {
        let view = BalanceView::default();
        for account in ["a", "b"] {
            view.fill(epoch(&view), &coop(), account, &read(1));
        }
        view.forget(&[Touched::Balance(coop(), "a".into())]);
        assert_eq!((hit(&view, "a"), hit(&view, "b")), (None, Some(read(1))));
        view.forget(&[Touched::Coop(coop())]);
        assert_eq!(hit(&view, "b"), None, "the coop's default currency may have changed");
        assert_eq!(view.len(), 0);
        // Nothing touched: no epoch change, so reads in flight still fill.
        let now = epoch(&view);
        view.forget(&[]);
        assert_eq!(epoch(&view), now);
    }

    #[test]
    fn the_view_stays_bounded() {
        let view = BalanceView::default();
        for n in 0..MAX_ACCOUNTS + 10 {
            view.fill(epoch(&view), &coop(), &format!("account{n}"), &read(1));
            assert!(view.len() <= MAX_ACCOUNTS);
        }
        assert!(hit(&view, &format!("account{}", MAX_ACCOUNTS + 9)).is_some());
    }
}
